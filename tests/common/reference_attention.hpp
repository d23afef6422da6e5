// The float64 reference attention (reference/attention.hpp) over HostTensors, the tests' currency:
//   q: [batch, heads_q, q_len, d]   k: [batch, heads_kv, kv_len, d]   v: [batch, heads_kv, kv_len, dv]
//   (HostTensor index order; any strides, so [b,h,s,d] and [b,s,h,d] inputs both work.)
//   GQA, causal aligned bottom-right, rows that see no key, LSE: as documented in reference/attention.hpp.
//   LSE is laid out [batch][heads_q][q_len].
#pragma once
#include <vector>

#include "reference/attention.hpp"
#include "tests/common/host_tensor.hpp"

namespace qattn {
namespace test {

struct AttentionConfig {
  bool causal = false;
  double softmax_scale = 0.0;   // 0: 1 / sqrt(d)
};

HostTensor reference_attention(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                               const AttentionConfig& config, std::vector<double>* lse = nullptr,
                               Layout out_layout = Layout::bhsd);

// Keys query row i may see: [0, visible_keys(i)); may be <= 0 (then none).
using reference::visible_keys;

// A HostTensor as the reference's strided operand (no copy: it points into t.data).
reference::Operand operand(const HostTensor& t);

}  // namespace test
}  // namespace qattn

// Float64 attention, the reference every attention test compares against.
//   q: [batch, heads_q, q_len, d]   k: [batch, heads_kv, kv_len, d]   v: [batch, heads_kv, kv_len, dv]
//   (HostTensor index order; any strides, so [b,h,s,d] and [b,s,h,d] inputs both work.)
//   GQA: query head h reads KV head h / (heads_q / heads_kv).
//   Causal masks align bottom-right: query i sees keys j <= i + kv_len - q_len. A row that sees no key
//   (q_len > kv_len) gets output 0 and LSE -inf.
//   LSE is the natural log of sum_j exp(scale * q.k_j), laid out [batch][heads_q][q_len].
// Work is split over (b, h) rows across hardware threads; the arithmetic per row is sequential, so the
// result does not depend on the thread count.
#pragma once
#include <vector>

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
long long visible_keys(int i, int q_len, int kv_len, bool causal);

}  // namespace test
}  // namespace qattn

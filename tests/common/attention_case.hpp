// One attention test case's inputs and float64 answer: Q, K and V drawn with the outlier profiles
// (q_like: a few x10 channels, k_like: channel bias, v_like: channel offsets) from `seed`, rounded to the
// I/O type, and the reference output (in `layout`) and LSE. Header-only: used by the GPU tests, which
// link the runtime (qattn/problem.hpp) as well as this folder's library.
#pragma once

#include <cstdint>
#include <vector>

#include "qattn/problem.hpp"
#include "tests/common/random_data.hpp"
#include "tests/common/reference_attention.hpp"

namespace qattn::test {

struct AttentionCase {
  HostTensor q, k, v, ref;
  std::vector<double> lse;   // [batch][heads_q][q_len], -inf for rows without keys
};

inline AttentionCase attention_case(const Problem& p, int d, bool causal, Layout layout, Fmt io, std::uint64_t seed) {
  AttentionCase c;
  c.q = random_tensor({p.batch, p.heads_q, p.q_len, d}, layout, q_like(), seed);
  c.k = random_tensor({p.batch, p.heads_kv, p.kv_len, d}, layout, k_like(), seed + 1);
  c.v = random_tensor({p.batch, p.heads_kv, p.kv_len, d}, layout, v_like(), seed + 2);
  for (HostTensor* t : {&c.q, &c.k, &c.v}) round_to(*t, io);
  c.ref = reference_attention(c.q, c.k, c.v, {causal, 0.0}, &c.lse, layout);
  return c;
}

}  // namespace qattn::test

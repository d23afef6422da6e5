// qattn::Problem — the run-time sizes of one attention call (everything not baked into a kernel).
// Text form (CLI --shape): "b=2,hq=32,hkv=8,q=4096,kv=4096"; missing keys keep the defaults below, and
// kv defaults to q.
#pragma once
#include <string>
#include <string_view>

#include "qattn/export.h"

QATTN_PUBLIC_BEGIN
namespace qattn {

struct Problem {
  int batch = 1;
  int heads_q = 32;
  int heads_kv = 8;
  int q_len = 1024;
  int kv_len = 1024;
  bool operator==(const Problem& o) const {
    return batch == o.batch && heads_q == o.heads_q && heads_kv == o.heads_kv && q_len == o.q_len &&
           kv_len == o.kv_len;
  }
};

std::string to_string(const Problem& p);
Problem parse_problem(std::string_view text);   // throws qattn::Error(bad_input)

// Multiply-accumulate work of the two matrix products, counted as FlashAttention does:
// 4 * b * hq * q * kv * d, halved when causal (with q == kv).
double attention_flops(const Problem& p, int head_dim, bool causal);

}  // namespace qattn
QATTN_PUBLIC_END

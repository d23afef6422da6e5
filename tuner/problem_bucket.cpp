#include <cstdio>

#include "qattn/error.hpp"
#include "qattn/tuner.hpp"

namespace qattn {
namespace {

long long pow2_at_least(long long n, long long lo, long long hi) {
  long long p = lo;
  while (p < n && p < hi) p *= 2;
  return p;
}

}  // namespace

// Tilings trade parallelism (grid size = q blocks x batch x heads) against per-CTA efficiency, and the
// KV length sets the main-loop trip count: those three sizes, rounded up to powers of two, pick a winner.
ProblemBucket problem_bucket_dims(const Problem& p) {
  return ProblemBucket{pow2_at_least(p.q_len, 16, 65536), pow2_at_least(p.kv_len, 16, 262144),
                       pow2_at_least(static_cast<long long>(p.batch) * p.heads_q, 1, 4096)};
}

std::string problem_bucket(const Problem& p) {
  const ProblemBucket b = problem_bucket_dims(p);
  return "q" + std::to_string(b.q) + "_kv" + std::to_string(b.kv) + "_bh" + std::to_string(b.bh);
}

Problem bucket_representative(const std::string& bucket, const Problem& like) {
  long long q = 0, kv = 0, bh = 0;
  if (std::sscanf(bucket.c_str(), "q%lld_kv%lld_bh%lld", &q, &kv, &bh) != 3 || q < 1 || kv < 1 || bh < 1)
    throw_bad_input("bad problem bucket '" + bucket + "'; expected q<pow2>_kv<pow2>_bh<pow2>");
  Problem p = like;
  p.q_len = static_cast<int>(q);
  p.kv_len = static_cast<int>(kv);
  const long long heads = like.heads_q > 0 ? like.heads_q : 1;
  p.batch = static_cast<int>(bh / heads > 0 ? bh / heads : 1);
  return p;
}

}  // namespace qattn

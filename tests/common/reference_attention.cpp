#include "tests/common/reference_attention.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>

namespace qattn {
namespace test {

long long visible_keys(int i, int q_len, int kv_len, bool causal) {
  if (!causal) return kv_len;
  return std::min<long long>(kv_len, 1LL * i + kv_len - q_len + 1);
}

namespace {

void check_shapes(const HostTensor& q, const HostTensor& k, const HostTensor& v) {
  const Shape &sq = q.shape, &sk = k.shape, &sv = v.shape;
  if (sq.batch != sk.batch || sk.batch != sv.batch)
    throw std::invalid_argument("reference_attention: q, k, v batch sizes differ");
  if (sk.heads != sv.heads || sk.seq != sv.seq)
    throw std::invalid_argument("reference_attention: k and v differ in heads or length");
  if (sq.dim != sk.dim) throw std::invalid_argument("reference_attention: q and k head dims differ");
  if (sk.heads < 1 || sq.heads % sk.heads != 0)
    throw std::invalid_argument("reference_attention: heads_q " + std::to_string(sq.heads) +
                                " is not a multiple of heads_kv " + std::to_string(sk.heads));
}

// One (b, h_q) head: contiguous copies of its rows keep the inner loops cache-friendly.
void attend_head(const HostTensor& q, const HostTensor& k, const HostTensor& v, const AttentionConfig& cfg,
                 double scale, int b, int hq, HostTensor& o, std::vector<double>* lse) {
  const int q_len = q.shape.seq, kv_len = k.shape.seq, d = q.shape.dim, dv = v.shape.dim;
  const int hk = hq / (q.shape.heads / k.shape.heads);
  std::vector<double> kh(static_cast<size_t>(kv_len) * d), vh(static_cast<size_t>(kv_len) * dv);
  for (int j = 0; j < kv_len; ++j) {
    for (int c = 0; c < d; ++c) kh[static_cast<size_t>(j) * d + c] = k.at(b, hk, j, c);
    for (int c = 0; c < dv; ++c) vh[static_cast<size_t>(j) * dv + c] = v.at(b, hk, j, c);
  }
  std::vector<double> qi(d), s(kv_len), acc(dv);
  for (int i = 0; i < q_len; ++i) {
    const long long n = std::max(0LL, visible_keys(i, q_len, kv_len, cfg.causal));
    for (int c = 0; c < d; ++c) qi[c] = q.at(b, hq, i, c);
    double mx = -std::numeric_limits<double>::infinity();
    for (long long j = 0; j < n; ++j) {
      const double* kr = &kh[static_cast<size_t>(j) * d];
      double dot = 0;
      for (int c = 0; c < d; ++c) dot += qi[c] * kr[c];
      s[j] = dot * scale;
      mx = std::max(mx, s[j]);
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    double sum = 0;
    for (long long j = 0; j < n; ++j) {
      const double p = std::exp(s[j] - mx);
      sum += p;
      const double* vr = &vh[static_cast<size_t>(j) * dv];
      for (int c = 0; c < dv; ++c) acc[c] += p * vr[c];
    }
    for (int c = 0; c < dv; ++c) o.at(b, hq, i, c) = n > 0 ? acc[c] / sum : 0.0;
    if (lse) {
      (*lse)[(static_cast<size_t>(b) * q.shape.heads + hq) * q_len + i] =
          n > 0 ? mx + std::log(sum) : -std::numeric_limits<double>::infinity();
    }
  }
}

}  // namespace

HostTensor reference_attention(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                               const AttentionConfig& config, std::vector<double>* lse, Layout out_layout) {
  check_shapes(q, k, v);
  const double scale = config.softmax_scale != 0.0 ? config.softmax_scale : 1.0 / std::sqrt(q.shape.dim);
  HostTensor o = HostTensor::zeros(Shape{q.shape.batch, q.shape.heads, q.shape.seq, v.shape.dim}, out_layout);
  if (lse) lse->assign(static_cast<size_t>(q.shape.batch) * q.shape.heads * q.shape.seq, 0.0);

  const int heads = q.shape.batch * q.shape.heads;
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int idx = next++; idx < heads; idx = next++)
      attend_head(q, k, v, config, scale, idx / q.shape.heads, idx % q.shape.heads, o, lse);
  };
  const int n_threads = std::max(1, std::min<int>(heads, static_cast<int>(std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n_threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return o;
}

}  // namespace test
}  // namespace qattn

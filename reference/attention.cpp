#include "reference/attention.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>

namespace qattn::reference {

Strides bhsd_strides(int heads, int seq, int dim) {
  return {1LL * heads * seq * dim, 1LL * seq * dim, dim, 1};
}

Strides bshd_strides(int heads, int seq, int dim) {
  return {1LL * seq * heads * dim, dim, 1LL * heads * dim, 1};
}

long long visible_keys(int i, int q_len, int kv_len, bool causal) {
  if (!causal) return kv_len;
  return std::min<long long>(kv_len, 1LL * i + kv_len - q_len + 1);
}

double attend_row(const double* qi, const double* k, const double* v, long long n, int d, int dv, double scale,
                  double* out) {
  std::fill(out, out + dv, 0.0);
  if (n <= 0) return -std::numeric_limits<double>::infinity();
  std::vector<double> s(static_cast<size_t>(n));
  double mx = -std::numeric_limits<double>::infinity();
  for (long long j = 0; j < n; ++j) {
    const double* kr = k + static_cast<size_t>(j) * d;
    double dot = 0;
    for (int c = 0; c < d; ++c) dot += qi[c] * kr[c];
    s[j] = dot * scale;
    mx = std::max(mx, s[j]);
  }
  double sum = 0;
  for (long long j = 0; j < n; ++j) {
    const double p = std::exp(s[j] - mx);
    sum += p;
    const double* vr = v + static_cast<size_t>(j) * dv;
    for (int c = 0; c < dv; ++c) out[c] += p * vr[c];
  }
  for (int c = 0; c < dv; ++c) out[c] /= sum;
  return mx + std::log(sum);
}

namespace {

void check(const Dims& x, const std::vector<RowId>& rows) {
  if (x.batch < 1 || x.heads_q < 1 || x.heads_kv < 1 || x.q_len < 0 || x.kv_len < 0 || x.d < 1 || x.dv < 1)
    throw std::invalid_argument("reference attention: dims must be positive (lengths >= 0)");
  if (x.heads_q % x.heads_kv != 0)
    throw std::invalid_argument("reference attention: heads_q " + std::to_string(x.heads_q) +
                                " is not a multiple of heads_kv " + std::to_string(x.heads_kv));
  for (const RowId& r : rows)
    if (r.b < 0 || r.b >= x.batch || r.h < 0 || r.h >= x.heads_q || r.i < 0 || r.i >= x.q_len)
      throw std::invalid_argument("reference attention: row (b " + std::to_string(r.b) + ", h " +
                                  std::to_string(r.h) + ", i " + std::to_string(r.i) + ") is outside the problem");
}

}  // namespace

std::vector<double> attention_rows(const Operand& q, const Operand& k, const Operand& v, const Dims& x,
                                   const Options& options, const std::vector<RowId>& rows, std::vector<double>* lse) {
  check(x, rows);
  const double scale = options.softmax_scale != 0.0 ? options.softmax_scale : 1.0 / std::sqrt(x.d);
  const int group = x.heads_q / x.heads_kv;
  std::vector<double> out(rows.size() * static_cast<size_t>(x.dv), 0.0);
  if (lse) lse->assign(rows.size(), 0.0);

  // Runs of consecutive rows of one (batch, query head), the unit of work of a thread: it copies the
  // head's K/V rows once, contiguously, which keeps the inner loops cache-friendly.
  std::vector<size_t> run_start;
  for (size_t r = 0; r < rows.size(); ++r)
    if (r == 0 || rows[r].b != rows[r - 1].b || rows[r].h != rows[r - 1].h) run_start.push_back(r);
  run_start.push_back(rows.size());
  const int runs = static_cast<int>(run_start.size()) - 1;

  std::atomic<int> next{0};
  auto worker = [&] {
    std::vector<double> kh(static_cast<size_t>(x.kv_len) * x.d), vh(static_cast<size_t>(x.kv_len) * x.dv);
    std::vector<double> qi(static_cast<size_t>(x.d));
    for (int run = next++; run < runs; run = next++) {
      const int b = rows[run_start[run]].b, hk = rows[run_start[run]].h / group;
      for (int j = 0; j < x.kv_len; ++j) {
        for (int c = 0; c < x.d; ++c) kh[static_cast<size_t>(j) * x.d + c] = k.at(b, hk, j, c);
        for (int c = 0; c < x.dv; ++c) vh[static_cast<size_t>(j) * x.dv + c] = v.at(b, hk, j, c);
      }
      for (size_t r = run_start[run]; r < run_start[run + 1]; ++r) {
        for (int c = 0; c < x.d; ++c) qi[c] = q.at(b, rows[r].h, rows[r].i, c);
        const long long n = visible_keys(rows[r].i, x.q_len, x.kv_len, options.causal);
        const double l = attend_row(qi.data(), kh.data(), vh.data(), n, x.d, x.dv, scale, &out[r * x.dv]);
        if (lse) (*lse)[r] = l;
      }
    }
  };
  const int n_threads =
      std::max(1, std::min<int>(runs, static_cast<int>(std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n_threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return out;
}

std::vector<RowId> all_rows(const Dims& x) {
  std::vector<RowId> rows;
  rows.reserve(static_cast<size_t>(x.batch) * x.heads_q * x.q_len);
  for (int b = 0; b < x.batch; ++b)
    for (int h = 0; h < x.heads_q; ++h)
      for (int i = 0; i < x.q_len; ++i) rows.push_back({b, h, i});
  return rows;
}

std::vector<RowId> sample_rows(const Dims& x, int max_heads, int max_rows) {
  const long long heads = static_cast<long long>(x.batch) * x.heads_q;
  const int nh = static_cast<int>(std::min<long long>(heads, max_heads));
  const int nr = std::min(x.q_len, max_rows);
  std::vector<RowId> rows;
  for (int a = 0; a < nh; ++a) {
    const long long bh = nh == 1 ? 0 : a * (heads - 1) / (nh - 1);
    for (int r = 0; r < nr; ++r) {
      const int i = nr == 1 ? 0 : static_cast<int>(static_cast<long long>(r) * (x.q_len - 1) / (nr - 1));
      rows.push_back({static_cast<int>(bh / x.heads_q), static_cast<int>(bh % x.heads_q), i});
    }
  }
  return rows;
}

std::vector<double> attention(const Operand& q, const Operand& k, const Operand& v, const Dims& dims,
                              const Options& options, std::vector<double>* lse) {
  return attention_rows(q, k, v, dims, options, all_rows(dims), lse);
}

}  // namespace qattn::reference

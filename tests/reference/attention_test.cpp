// reference/attention.hpp against cases small enough to compute by hand, and its invariants: causal
// bottom-right alignment, GQA head mapping, LSE, a rows subset equal to the same rows of the full result,
// layouts and element types that do not change a bit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "reference/attention.hpp"

namespace qattn::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Contiguous [b, h, s, c] values from a seed, small enough that exp never overflows.
std::vector<double> values(long long n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n01(0.0, 1.0);
  std::vector<double> x(static_cast<size_t>(n));
  for (double& e : x) e = n01(rng);
  return x;
}

Operand bhsd(const std::vector<double>& x, int heads, int seq, int dim) {
  return Operand::of(x.data(), bhsd_strides(heads, seq, dim));
}

TEST(ReferenceLibrary, TwoKeysByHand) {
  // q = (1, 0); keys (1, 0) and (0, 1); scale 1: scores 1 and 0, p = (e, 1) / (e + 1).
  const std::vector<double> q = {1, 0}, k = {1, 0, 0, 1}, v = {1, 2, 3, 4};
  const Dims dims{1, 1, 1, 1, 2, 2, 2};
  std::vector<double> lse;
  const std::vector<double> o = attention(bhsd(q, 1, 1, 2), bhsd(k, 1, 2, 2), bhsd(v, 1, 2, 2), dims, {false, 1.0}, &lse);
  const double e = std::exp(1.0), p0 = e / (e + 1), p1 = 1 / (e + 1);
  ASSERT_EQ(o.size(), 2u);
  EXPECT_NEAR(o[0], p0 * 1 + p1 * 3, 1e-15);
  EXPECT_NEAR(o[1], p0 * 2 + p1 * 4, 1e-15);
  ASSERT_EQ(lse.size(), 1u);
  EXPECT_NEAR(lse[0], std::log(e + 1), 1e-15);
}

TEST(ReferenceLibrary, DefaultScaleIsOneOverSqrtD) {
  // d = 4, q . k = 4 for the first key, 0 for the second: scores 2 and 0 with scale 1/2.
  const std::vector<double> q = {1, 1, 1, 1}, k = {1, 1, 1, 1, 0, 0, 0, 0}, v = {1, 0};
  const Dims dims{1, 1, 1, 1, 2, 4, 1};
  std::vector<double> lse;
  const std::vector<double> o = attention(bhsd(q, 1, 1, 4), bhsd(k, 1, 2, 4), bhsd(v, 1, 2, 1), dims, {}, &lse);
  EXPECT_NEAR(o[0], std::exp(2.0) / (std::exp(2.0) + 1), 1e-15);
  EXPECT_NEAR(lse[0], std::log(std::exp(2.0) + 1), 1e-15);
}

TEST(ReferenceLibrary, CausalAlignsBottomRight) {
  // q_len 4 > kv_len 2: rows 0, 1 see no key (output 0, LSE -inf), row 2 sees key 0, row 3 both keys.
  const std::vector<double> q = {1, 1, 1, 1}, k = {0.5, -0.25}, v = {10, 20};
  const Dims dims{1, 1, 1, 4, 2, 1, 1};
  std::vector<double> lse;
  const std::vector<double> o = attention(bhsd(q, 1, 4, 1), bhsd(k, 1, 2, 1), bhsd(v, 1, 2, 1), dims, {true, 1.0}, &lse);
  EXPECT_EQ(o[0], 0.0);
  EXPECT_EQ(o[1], 0.0);
  EXPECT_EQ(lse[0], -kInf);
  EXPECT_EQ(lse[1], -kInf);
  EXPECT_DOUBLE_EQ(o[2], 10.0);
  EXPECT_DOUBLE_EQ(lse[2], 0.5);
  const double p0 = std::exp(0.5), p1 = std::exp(-0.25);
  EXPECT_NEAR(o[3], (10 * p0 + 20 * p1) / (p0 + p1), 1e-13);
  EXPECT_NEAR(lse[3], std::log(p0 + p1), 1e-15);

  // q_len 2 < kv_len 5: row 0 sees 4 keys, row 1 all 5.
  EXPECT_EQ(visible_keys(0, 2, 5, true), 4);
  EXPECT_EQ(visible_keys(1, 2, 5, true), 5);
  EXPECT_EQ(visible_keys(0, 4, 2, true), -1);
  EXPECT_EQ(visible_keys(0, 4, 2, false), 2);
}

TEST(ReferenceLibrary, GqaQueryHeadReadsItsKvHead) {
  // 4 query heads over 2 KV heads: heads 0, 1 read KV head 0 (V = 1), heads 2, 3 KV head 1 (V = 2).
  const int hq = 4, hkv = 2, kv = 3;
  const std::vector<double> q = values(hq * 2, 1), k = values(hkv * kv * 2, 2);
  std::vector<double> v(static_cast<size_t>(hkv * kv));
  for (int h = 0; h < hkv; ++h)
    for (int j = 0; j < kv; ++j) v[static_cast<size_t>(h * kv + j)] = h + 1;
  const Dims dims{1, hq, hkv, 1, kv, 2, 1};
  const std::vector<double> o = attention(bhsd(q, hq, 1, 2), bhsd(k, hkv, kv, 2), bhsd(v, hkv, kv, 1), dims, {});
  EXPECT_NEAR(o[0], 1.0, 1e-15);
  EXPECT_NEAR(o[1], 1.0, 1e-15);
  EXPECT_NEAR(o[2], 2.0, 1e-15);
  EXPECT_NEAR(o[3], 2.0, 1e-15);
  EXPECT_THROW(attention(bhsd(q, hq, 1, 2), bhsd(k, hkv, kv, 2), bhsd(v, hkv, kv, 1), Dims{1, 3, 2, 1, kv, 2, 1}, {}),
               std::invalid_argument);
}

struct Problem {
  Dims dims{2, 4, 2, 9, 13, 8, 6};
  std::vector<double> q = values(1LL * 2 * 4 * 9 * 8, 11), k = values(1LL * 2 * 2 * 13 * 8, 12),
                      v = values(1LL * 2 * 2 * 13 * 6, 13);
  Operand oq() const { return bhsd(q, dims.heads_q, dims.q_len, dims.d); }
  Operand ok() const { return bhsd(k, dims.heads_kv, dims.kv_len, dims.d); }
  Operand ov() const { return bhsd(v, dims.heads_kv, dims.kv_len, dims.dv); }
};

TEST(ReferenceLibrary, RowsSubsetEqualsTheSameRowsOfTheFullResultBitForBit) {
  const Problem p;
  for (bool causal : {false, true}) {
    std::vector<double> lse_all, lse_rows;
    const std::vector<double> all = attention(p.oq(), p.ok(), p.ov(), p.dims, {causal, 0}, &lse_all);
    const std::vector<RowId> rows = {{1, 3, 8}, {0, 0, 0}, {0, 0, 5}, {1, 2, 4}, {0, 1, 8}};
    const std::vector<double> some = attention_rows(p.oq(), p.ok(), p.ov(), p.dims, {causal, 0}, rows, &lse_rows);
    ASSERT_EQ(some.size(), rows.size() * p.dims.dv);
    for (size_t r = 0; r < rows.size(); ++r) {
      const size_t full = (static_cast<size_t>(rows[r].b) * p.dims.heads_q + rows[r].h) * p.dims.q_len + rows[r].i;
      for (int c = 0; c < p.dims.dv; ++c) EXPECT_EQ(some[r * p.dims.dv + c], all[full * p.dims.dv + c]) << r;
      EXPECT_EQ(lse_rows[r], lse_all[full]);
    }
  }
  EXPECT_THROW(attention_rows(p.oq(), p.ok(), p.ov(), p.dims, {}, {{0, 4, 0}}), std::invalid_argument);
}

TEST(ReferenceLibrary, LayoutAndFloatInputsChangeNothing) {
  const Problem p;
  const std::vector<double> want = attention(p.oq(), p.ok(), p.ov(), p.dims, {true, 0});
  // The same values stored [b, s, h, c].
  auto to_bshd = [](const std::vector<double>& x, int batch, int heads, int seq, int dim) {
    std::vector<double> y(x.size());
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h)
        for (int s = 0; s < seq; ++s)
          for (int c = 0; c < dim; ++c)
            y[((static_cast<size_t>(b) * seq + s) * heads + h) * dim + c] =
                x[((static_cast<size_t>(b) * heads + h) * seq + s) * dim + c];
    return y;
  };
  const Dims& x = p.dims;
  const std::vector<double> q2 = to_bshd(p.q, x.batch, x.heads_q, x.q_len, x.d),
                            k2 = to_bshd(p.k, x.batch, x.heads_kv, x.kv_len, x.d),
                            v2 = to_bshd(p.v, x.batch, x.heads_kv, x.kv_len, x.dv);
  const std::vector<double> got =
      attention(Operand::of(q2.data(), bshd_strides(x.heads_q, x.q_len, x.d)),
                Operand::of(k2.data(), bshd_strides(x.heads_kv, x.kv_len, x.d)),
                Operand::of(v2.data(), bshd_strides(x.heads_kv, x.kv_len, x.dv)), x, {true, 0});
  EXPECT_EQ(got, want);

  // float inputs are read as the doubles they convert to.
  auto narrow = [](const std::vector<double>& a) { return std::vector<float>(a.begin(), a.end()); };
  auto widen = [](const std::vector<float>& a) { return std::vector<double>(a.begin(), a.end()); };
  const std::vector<float> qf = narrow(p.q), kf = narrow(p.k), vf = narrow(p.v);
  const std::vector<double> qd = widen(qf), kd = widen(kf), vd = widen(vf);
  EXPECT_EQ(attention(Operand::of(qf.data(), bhsd_strides(x.heads_q, x.q_len, x.d)),
                      Operand::of(kf.data(), bhsd_strides(x.heads_kv, x.kv_len, x.d)),
                      Operand::of(vf.data(), bhsd_strides(x.heads_kv, x.kv_len, x.dv)), x, {}),
            attention(bhsd(qd, x.heads_q, x.q_len, x.d), bhsd(kd, x.heads_kv, x.kv_len, x.d),
                      bhsd(vd, x.heads_kv, x.kv_len, x.dv), x, {}));
}

TEST(ReferenceLibrary, AttendRowIsTheRowKernel) {
  const Problem p;
  const Dims& x = p.dims;
  const double scale = 0.37;
  std::vector<double> lse;
  const std::vector<double> all = attention(p.oq(), p.ok(), p.ov(), x, {true, scale}, &lse);
  // Row (b 1, h 3, i 6) reads KV head 1 of batch 1, contiguous in the bhsd buffers.
  const int b = 1, h = 3, i = 6, hk = h / (x.heads_q / x.heads_kv);
  const double* qi = &p.q[((static_cast<size_t>(b) * x.heads_q + h) * x.q_len + i) * x.d];
  const double* kh = &p.k[(static_cast<size_t>(b) * x.heads_kv + hk) * x.kv_len * x.d];
  const double* vh = &p.v[(static_cast<size_t>(b) * x.heads_kv + hk) * x.kv_len * x.dv];
  std::vector<double> out(static_cast<size_t>(x.dv));
  const double l = attend_row(qi, kh, vh, visible_keys(i, x.q_len, x.kv_len, true), x.d, x.dv, scale, out.data());
  const size_t row = (static_cast<size_t>(b) * x.heads_q + h) * x.q_len + i;
  EXPECT_EQ(l, lse[row]);
  for (int c = 0; c < x.dv; ++c) EXPECT_EQ(out[c], all[row * x.dv + c]);
  EXPECT_EQ(attend_row(qi, kh, vh, 0, x.d, x.dv, scale, out.data()), -kInf);
  for (double e : out) EXPECT_EQ(e, 0.0);
}

TEST(ReferenceLibrary, SampleRowsSpreadOverHeadsAndRowsWithTheEnds) {
  const Dims dims{2, 8, 2, 1000, 1000, 64, 64};
  const std::vector<RowId> rows = sample_rows(dims, 4, 256);
  ASSERT_EQ(rows.size(), 4u * 256u);
  EXPECT_EQ(rows.front().b, 0);
  EXPECT_EQ(rows.front().h, 0);
  EXPECT_EQ(rows.front().i, 0);
  EXPECT_EQ(rows.back().b, 1);
  EXPECT_EQ(rows.back().h, 7);
  EXPECT_EQ(rows.back().i, 999);
  for (const RowId& r : rows) {
    EXPECT_LT(r.i, dims.q_len);
    EXPECT_LT(r.h, dims.heads_q);
  }
  const std::vector<RowId> small = sample_rows(Dims{1, 1, 1, 3, 3, 8, 8}, 4, 256);   // fewer than asked
  ASSERT_EQ(small.size(), 3u);
  EXPECT_EQ(small[2].i, 2);
}

}  // namespace
}  // namespace qattn::reference

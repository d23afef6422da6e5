// The float64 reference attention against a naive triple loop written independently here: explicit
// masks, a softmax without max subtraction (safe for the small inputs used), dense index arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "tests/common/metrics.hpp"
#include "tests/common/random_data.hpp"
#include "tests/common/reference_attention.hpp"

namespace qattn {
namespace test {
namespace {

struct TinyCase {
  int batch, heads_q, heads_kv, q_len, kv_len, d, dv;
  bool causal;
  double scale;   // 0: default
  Layout in_layout, out_layout;
};

std::string name_of(const TinyCase& c) {
  return "b" + std::to_string(c.batch) + " hq" + std::to_string(c.heads_q) + " hkv" + std::to_string(c.heads_kv) +
         " q" + std::to_string(c.q_len) + " kv" + std::to_string(c.kv_len) + " d" + std::to_string(c.d) + " dv" +
         std::to_string(c.dv) + (c.causal ? " causal " : " ") + to_string(c.in_layout) + "->" +
         to_string(c.out_layout);
}

// out[b][h][i][c] and lse[b][h][i], straight from the definitions.
void naive_attention(const HostTensor& q, const HostTensor& k, const HostTensor& v, const TinyCase& c,
                     std::vector<double>& out, std::vector<double>& lse) {
  const double scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.d));
  out.assign(static_cast<size_t>(c.batch) * c.heads_q * c.q_len * c.dv, 0.0);
  lse.assign(static_cast<size_t>(c.batch) * c.heads_q * c.q_len, 0.0);
  const int group = c.heads_q / c.heads_kv;
  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < c.heads_q; ++h)
      for (int i = 0; i < c.q_len; ++i) {
        std::vector<double> w(c.kv_len, 0.0);
        double total = 0;
        for (int j = 0; j < c.kv_len; ++j) {
          const bool visible = !c.causal || j - (c.kv_len - c.q_len) <= i;
          if (!visible) continue;
          double dot = 0;
          for (int e = 0; e < c.d; ++e) dot += q.at(b, h, i, e) * k.at(b, h / group, j, e);
          w[j] = std::exp(dot * scale);
          total += w[j];
        }
        const size_t row = (static_cast<size_t>(b) * c.heads_q + h) * c.q_len + i;
        lse[row] = total > 0 ? std::log(total) : -std::numeric_limits<double>::infinity();
        for (int e = 0; e < c.dv; ++e) {
          double acc = 0;
          for (int j = 0; j < c.kv_len; ++j) acc += w[j] * v.at(b, h / group, j, e);
          out[row * c.dv + e] = total > 0 ? acc / total : 0.0;
        }
      }
}

TEST(ReferenceAttention, MatchesNaiveTripleLoop) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const TinyCase cases[] = {
      {1, 1, 1, 5, 5, 8, 8, false, 0, Layout::bhsd, Layout::bhsd},
      {2, 4, 2, 5, 7, 8, 8, true, 0, Layout::bshd, Layout::bhsd},     // GQA 2, causal q < kv
      {1, 4, 1, 9, 4, 16, 8, true, 0.3, Layout::bhsd, Layout::bshd},  // GQA 4, causal q > kv: empty rows
      {2, 3, 3, 6, 6, 4, 12, true, 0, Layout::bshd, Layout::bshd},    // dv != d
      {1, 6, 2, 1, 11, 8, 8, true, 0, Layout::bhsd, Layout::bhsd},    // one query row (decode-like)
      {1, 2, 2, 7, 3, 8, 8, false, 0, Layout::bshd, Layout::bhsd},    // non-causal q > kv
  };
  std::uint64_t s = seed;
  for (const TinyCase& c : cases) {
    SCOPED_TRACE(name_of(c));
    const HostTensor q = random_tensor(Shape{c.batch, c.heads_q, c.q_len, c.d}, c.in_layout, plain(), s++);
    const HostTensor k = random_tensor(Shape{c.batch, c.heads_kv, c.kv_len, c.d}, c.in_layout, plain(), s++);
    const HostTensor v = random_tensor(Shape{c.batch, c.heads_kv, c.kv_len, c.dv}, c.in_layout, v_like(), s++);
    std::vector<double> lse, want_o, want_lse;
    const HostTensor o = reference_attention(q, k, v, AttentionConfig{c.causal, c.scale}, &lse, c.out_layout);
    naive_attention(q, k, v, c, want_o, want_lse);
    ASSERT_EQ(o.shape.dim, c.dv);
    EXPECT_EQ(o.strides.sc, 1);
    EXPECT_EQ(o.strides.ss, c.out_layout == Layout::bhsd ? c.dv : c.heads_q * c.dv);
    const ErrorMetrics m = compare(want_o, o.logical());
    EXPECT_LE(m.max_abs, 1e-12) << m.report();
    EXPECT_GT(m.count, 0);
    ASSERT_EQ(lse.size(), want_lse.size());
    for (size_t i = 0; i < lse.size(); ++i) {
      if (std::isinf(want_lse[i])) {
        EXPECT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "row " << i;
      } else {
        EXPECT_NEAR(lse[i], want_lse[i], 1e-12) << "row " << i;
      }
    }
  }
}

TEST(ReferenceAttention, CausalRowsAlignBottomRight) {
  // q_len 6 > kv_len 3: rows 0..2 see nothing, row 3 sees key 0 only, row 5 sees all keys.
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const HostTensor q = random_tensor(Shape{1, 1, 6, 4}, Layout::bhsd, plain(), seed);
  const HostTensor k = random_tensor(Shape{1, 1, 3, 4}, Layout::bhsd, plain(), seed + 1);
  const HostTensor v = random_tensor(Shape{1, 1, 3, 4}, Layout::bhsd, v_like(), seed + 2);
  std::vector<double> lse;
  const HostTensor o = reference_attention(q, k, v, AttentionConfig{true, 0.5}, &lse);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(std::isinf(lse[i]) && lse[i] < 0);
    for (int c = 0; c < 4; ++c) EXPECT_EQ(o.at(0, 0, i, c), 0.0);
  }
  double s00 = 0;
  for (int c = 0; c < 4; ++c) s00 += q.at(0, 0, 3, c) * k.at(0, 0, 0, c);
  EXPECT_NEAR(lse[3], 0.5 * s00, 1e-14);
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(o.at(0, 0, 3, c), v.at(0, 0, 0, c), 1e-14);
  EXPECT_EQ(visible_keys(0, 6, 3, true), -2);
  EXPECT_EQ(visible_keys(5, 6, 3, true), 3);
  EXPECT_EQ(visible_keys(0, 2, 5, true), 4);
  EXPECT_EQ(visible_keys(0, 2, 5, false), 5);
}

TEST(ReferenceAttention, RejectsMismatchedHeads) {
  const HostTensor q = HostTensor::zeros(Shape{1, 3, 2, 4});
  const HostTensor kv = HostTensor::zeros(Shape{1, 2, 2, 4});
  EXPECT_THROW(reference_attention(q, kv, kv, AttentionConfig{}), std::invalid_argument);
}

}  // namespace
}  // namespace test
}  // namespace qattn

// Q smoothing by block means (smooth=q), float64: the block means, the round trip of the smoothed Q,
// the two-code block means of the attention kernel, and the invariance of the scores (Q̂ smoothed plus
// ΔS = q̄·K̂ reproduces Q·K̂ up to the quantization bound).
#include <gtest/gtest.h>

#include <cmath>

#include "qattn/abi.h"
#include "tests/common/qsmooth_reference.hpp"
#include "tests/common/quant_reference.hpp"
#include "tests/common/random_data.hpp"
#include "tests/common/score_error.hpp"

namespace qattn {
namespace test {
namespace {

struct QGran {
  Gran gran;
  int group;
  const char* name;
};
// Q's granularities as the runtime quantizes them (helper_kernels.cpp quant_slots).
const QGran kQGrans[] = {{Gran::per_tensor, 0, "per_tensor"}, {Gran::per_block, 64, "per_block"},
                         {Gran::per_warp, 32, "per_warp"},   {Gran::per_thread, 32, "per_thread"},
                         {Gran::per_token, 0, "per_token"}};

const double* mean_row(const std::vector<double>& means, const Shape& sh, int b, int h, int s) {
  return &means[((static_cast<size_t>(b) * sh.heads + h) * q_mean_blocks(sh.seq) + s / kQMeanBlock) * sh.dim];
}

TEST(QSmoothReference, BlockMeansCenterEveryBlock) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  for (int seq : {1, 63, 64, 65, 130}) {
    const Shape sh{2, 2, seq, 64};
    const HostTensor q = q_block_offset_data(sh, seq % 2 ? Layout::bshd : Layout::bhsd, seed + seq);
    const std::vector<double> means = q_block_means(q);
    ASSERT_EQ(means.size(), static_cast<size_t>(2 * 2 * q_mean_blocks(seq) * 64));
    const HostTensor r = subtract_q_block_means(q, means);
    for (int b = 0; b < 2; ++b)
      for (int h = 0; h < 2; ++h)
        for (int k = 0; k < q_mean_blocks(seq); ++k)
          for (int c = 0; c < 64; ++c) {
            double sum = 0;
            const int last = std::min(seq, (k + 1) * kQMeanBlock);
            for (int s = k * kQMeanBlock; s < last; ++s) sum += r.at(b, h, s, c);
            EXPECT_NEAR(sum, 0.0, 1e-9) << "seq " << seq << " block " << k;
          }
    // A block of one row (seq 1, 65) is its own mean: its smoothed row is zero.
    if (seq % kQMeanBlock == 1) {
      for (int c = 0; c < 64; ++c) EXPECT_EQ(r.at(1, 1, seq - 1, c), 0.0);
    }
  }
}

// Dequantized smoothed Q plus the block mean is Q within half a scale step, and on data with block
// offsets the smoothed codes lose less than the plain ones at every granularity.
TEST(QSmoothReference, RoundTripWithinHalfScaleAndBetterThanPlain) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const Shape sh{1, 3, 200, 128};
  const HostTensor q = q_block_offset_data(sh, Layout::bhsd, seed);
  const std::vector<double> means = q_block_means(q);
  const HostTensor r = subtract_q_block_means(q, means);
  for (const QGran& g : kQGrans) {
    SCOPED_TRACE(g.name);
    const QuantRef sm = quantize_reference(r, QuantConfig{g.gran, g.group, 127, false});
    const QuantRef plain = quantize_reference(q, QuantConfig{g.gran, g.group, 127, false});
    double err_sm = 0, err_plain = 0;
    for (int h = 0; h < sh.heads; ++h)
      for (int s = 0; s < sh.seq; ++s)
        for (int c = 0; c < sh.dim; ++c) {
          const double x = q.at(0, h, s, c);
          const double back = sm.code(0, h, s, c) * sm.scale(0, h, s, c) + mean_row(means, sh, 0, h, s)[c];
          ASSERT_LE(std::fabs(back - x), sm.scale(0, h, s, c) / 2 * (1 + 1e-12) + 1e-12) << "s " << s << " c " << c;
          err_sm += std::fabs(back - x);
          err_plain += std::fabs(plain.code(0, h, s, c) * plain.scale(0, h, s, c) - x);
        }
    EXPECT_LT(err_sm, 0.9 * err_plain) << "mean abs error, smoothed vs plain";
  }
}

// The kernel's two int8 codes per block mean keep it to s / 508 (s = amax / 127): ~1/64500 of amax.
TEST(QSmoothReference, MeanCodesKeepTheMeanWithinScaleOver508) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const Shape sh{1, 4, 256, 96};
  const HostTensor q = q_block_offset_data(sh, Layout::bhsd, seed);
  const std::vector<double> means = q_block_means(q);
  for (size_t k = 0; k < means.size() / 96; ++k) {
    const MeanCodes m = quantize_mean(&means[k * 96], 96);
    ASSERT_GT(m.scale, 0.0);
    int top = 0;
    for (int c = 0; c < 96; ++c) {
      EXPECT_LE(std::abs(m.hi[static_cast<size_t>(c)]), 127);
      EXPECT_LE(std::abs(m.lo[static_cast<size_t>(c)]), 127);
      top = std::max(top, std::abs(m.hi[static_cast<size_t>(c)]));
      EXPECT_LE(std::fabs(m.value(c) - means[k * 96 + static_cast<size_t>(c)]), m.scale / 508 * (1 + 1e-9));
    }
    EXPECT_EQ(top, 127);   // the largest channel takes the full range
  }
  const std::vector<double> zero(64, 0.0);
  const MeanCodes z = quantize_mean(zero.data(), 64);
  EXPECT_EQ(z.scale, 0.0);
  for (int c = 0; c < 64; ++c) EXPECT_EQ(z.value(c), 0.0);
}

// S = Q̂'·K̂ + q̄̂·K̂ against Q·K̂ (K̂: the smoothed, quantized K the kernel sees, dequantized): within
// Σ_c |K̂_c| (s_q / 2 + s_m / 508) per score, and closer than plain Q̂·K̂ on block-offset data.
TEST(QSmoothReference, SmoothedScoresReproduceQK) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const Shape qs{1, 2, 130, 64}, ks{1, 2, 150, 64};
  const HostTensor q = q_block_offset_data(qs, Layout::bhsd, seed);
  const HostTensor k = random_tensor(ks, Layout::bhsd, k_like(), seed + 1);
  const QuantRef kq = quantize_reference(k, QuantConfig{Gran::per_block, 64, 127, true});
  const std::vector<double> means = q_block_means(q);
  const HostTensor r = subtract_q_block_means(q, means);
  for (const QGran& g : kQGrans) {
    SCOPED_TRACE(g.name);
    const QuantRef sm = quantize_reference(r, QuantConfig{g.gran, g.group, 127, false});
    const QuantRef plain = quantize_reference(q, QuantConfig{g.gran, g.group, 127, false});
    double err_sm = 0, err_plain = 0;
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < qs.seq; ++i) {
        const MeanCodes m = quantize_mean(mean_row(means, qs, 0, h, i), 64);
        for (int j = 0; j < ks.seq; ++j) {
          double exact = 0, got = 0, got_plain = 0, bound = 0;
          for (int c = 0; c < 64; ++c) {
            const double kc = kq.code(0, h, j, c) * kq.scale(0, h, j, c);   // K - mean_k, as the kernel sees it
            exact += q.at(0, h, i, c) * kc;
            got += (sm.code(0, h, i, c) * sm.scale(0, h, i, c) + m.value(c)) * kc;
            got_plain += plain.code(0, h, i, c) * plain.scale(0, h, i, c) * kc;
            bound += std::fabs(kc) * (sm.scale(0, h, i, c) / 2 + m.scale / 508);
          }
          ASSERT_LE(std::fabs(got - exact), bound * (1 + 1e-9) + 1e-9) << "row " << i << " key " << j;
          err_sm += std::fabs(got - exact);
          err_plain += std::fabs(got_plain - exact);
        }
      }
    EXPECT_LT(err_sm, 0.9 * err_plain) << "mean abs score error, smoothed vs plain";
  }
}

// The LSE allowance of the GPU test (score_error_bound with smooth_q) shrinks with Q smoothing on
// block-offset data (causal, GQA 2), summed over the rows. Only a little: the bound also holds K's
// quantization error times the whole q, offsets included, which smoothing Q does not touch.
TEST(QSmoothReference, ScoreErrorBoundShrinksWithQSmoothing) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const HostTensor q = q_block_offset_data({1, 4, 100, 64}, Layout::bshd, seed);
  const HostTensor k = random_tensor({1, 2, 120, 64}, Layout::bshd, k_like(), seed + 1);
  for (const QGran& g : kQGrans) {
    const std::vector<double> plain = score_error_bound(q, k, g.gran, 64, true, true, 127, false);
    const std::vector<double> sm = score_error_bound(q, k, g.gran, 64, true, true, 127, true);
    ASSERT_EQ(plain.size(), sm.size());
    double sum_plain = 0, sum_sm = 0;
    for (size_t i = 0; i < sm.size(); ++i) sum_plain += plain[i], sum_sm += sm[i];
    EXPECT_LT(sum_sm, sum_plain) << g.name;
  }
}

}  // namespace
}  // namespace test
}  // namespace qattn

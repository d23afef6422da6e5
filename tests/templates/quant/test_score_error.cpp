// The LSE allowance of the INT8 GPU tests: the per-row score error that Q/K quantization alone causes.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/common/quant_reference.hpp"
#include "tests/common/random_data.hpp"
#include "tests/common/reference_attention.hpp"
#include "tests/common/score_error.hpp"

namespace qattn {
namespace test {
namespace {

// LSE per row of softmax_scale * (a·b) + shift (shift per row), computed in float64.
std::vector<double> lse_rows(const std::vector<double>& scores, int rows, int cols, const std::vector<int>& visible) {
  std::vector<double> out(static_cast<size_t>(rows), -INFINITY);
  for (int i = 0; i < rows; ++i) {
    double m = -INFINITY, l = 0;
    for (int j = 0; j < visible[i]; ++j) m = std::max(m, scores[static_cast<size_t>(i) * cols + j]);
    for (int j = 0; j < visible[i]; ++j) l += std::exp(scores[static_cast<size_t>(i) * cols + j] - m);
    if (visible[i] > 0) out[static_cast<size_t>(i)] = m + std::log(l);
  }
  return out;
}

TEST(ScoreErrorBound, BoundsTheLseOfAKernelGivenTheQuantizedInputs) {
  for (Gran gran : {Gran::per_token, Gran::per_block, Gran::per_tensor})
    for (bool smooth : {false, true})
      for (bool causal : {false, true}) {
        const std::uint64_t seed = fresh_seed();
        SCOPED_TRACE(std::string(to_string(Layout::bhsd)) + " " + seed_note(seed));
        const int QL = 37, KL = 70, D = 64;
        const HostTensor q = random_tensor({1, 1, QL, D}, Layout::bhsd, q_like(), seed);
        const HostTensor k = random_tensor({1, 1, KL, D}, Layout::bhsd, k_like(), seed + 1);
        const int group = gran == Gran::per_block ? 16 : 0;
        const std::vector<double> bound = score_error_bound(q, k, gran, group, smooth, causal);
        // What an exact kernel on the quantized inputs returns (with the smoothing correction q·mean
        // added back using the exact q), and the true LSE.
        const QuantRef qr = quantize_reference(q, {gran, group, 127, false});
        const QuantRef kr = quantize_reference(k, {gran, group, 127, smooth});
        const double scale = 1.0 / std::sqrt(static_cast<double>(D));
        std::vector<double> s_kernel(static_cast<size_t>(QL) * KL), s_true(s_kernel.size());
        std::vector<int> visible(QL);
        for (int i = 0; i < QL; ++i) {
          visible[i] = static_cast<int>(std::max<long long>(0, std::min<long long>(visible_keys(i, QL, KL, causal), KL)));
          double q_mean = 0;
          for (int c = 0; c < D; ++c) q_mean += q.at(0, 0, i, c) * kr.mean_at(0, 0, c);
          for (int j = 0; j < KL; ++j) {
            double hat = 0, exact = 0;
            for (int c = 0; c < D; ++c) {
              hat += qr.code(0, 0, i, c) * qr.scale(0, 0, i, c) * kr.code(0, 0, j, c) * kr.scale(0, 0, j, c);
              exact += q.at(0, 0, i, c) * k.at(0, 0, j, c);
            }
            s_kernel[static_cast<size_t>(i) * KL + j] = scale * (hat + q_mean);
            s_true[static_cast<size_t>(i) * KL + j] = scale * exact;
          }
        }
        const std::vector<double> lk = lse_rows(s_kernel, QL, KL, visible), lt = lse_rows(s_true, QL, KL, visible);
        double largest = 0;
        for (int i = 0; i < QL; ++i) {
          if (visible[i] == 0) continue;
          EXPECT_LE(std::fabs(lk[i] - lt[i]), bound[i] + 1e-9) << "row " << i;
          largest = std::max(largest, bound[i]);
        }
        EXPECT_GT(largest, 0.0) << "outlier data is never quantized exactly";
      }
}

TEST(ScoreErrorBound, IsZeroWhenTheQuantizerIsExact) {
  // Every row holds integers in [-127, 127] with 127 present: per-token scale 1, exact codes.
  HostTensor q = HostTensor::zeros({1, 1, 5, 8}), k = HostTensor::zeros({1, 1, 9, 8});
  for (HostTensor* t : {&q, &k})
    for (int s = 0; s < t->shape.seq; ++s)
      for (int c = 0; c < 8; ++c) t->at(0, 0, s, c) = c == 0 ? 127 : ((s * 7 + c * 13) % 255) - 127;
  for (double b : score_error_bound(q, k, Gran::per_token, 0, false, false)) EXPECT_NEAR(b, 0.0, 1e-9);
}

// A Q element exactly between two codes: the bound covers the kernel taking either (the fused-Q kernel
// rounds x · fp32(qmax / amax), which breaks such a tie upward where the reference picks the even code).
// Measured on the H100: seed 10738652643190794757 of prefill_int4_gpu_test had x = 1.4375 with group
// abs-max 20.125 (qmax 7: x / scale = 0.5), the kernel took code 1, and its LSE sat 0.28 past the bound
// without this allowance.
TEST(ScoreErrorBound, CoversEitherCodeAtAnExactTie) {
  HostTensor q = HostTensor::zeros({1, 1, 1, 8}), k = HostTensor::zeros({1, 1, 1, 8});
  q.at(0, 0, 0, 0) = 14.0;   // abs-max: scale 2 at qmax 7
  q.at(0, 0, 0, 1) = 1.0;    // 1 / 2 = 0.5: the tie, reference code 0
  q.at(0, 0, 0, 2) = 1.5;    // 0.75: no tie, code 1
  for (int c = 0; c < 8; ++c) k.at(0, 0, 0, c) = 7.0 - c;   // per-token scale 1, exact codes
  const QuantRef qr = quantize_reference(q, {Gran::per_token, 0, 7, false});
  ASSERT_EQ(qr.code(0, 0, 0, 1), 0);
  const double scale = 1.0 / std::sqrt(8.0);
  const double exact = 14.0 * 7 + 1.0 * 6 + 1.5 * 5;
  const double even = 14.0 * 7 + 0.0 * 6 + 2.0 * 5, other = even + 2.0 * 6;   // code 0 or 1 for the tie
  const std::vector<double> bound = score_error_bound(q, k, Gran::per_token, 0, false, false, 7);
  ASSERT_EQ(bound.size(), 1u);
  EXPECT_GE(bound[0] + 1e-12, std::fabs(even - exact) * scale);
  EXPECT_GE(bound[0] + 1e-12, std::fabs(other - exact) * scale);
  EXPECT_NEAR(bound[0], (std::fabs(even - exact) + 2.0 * 6) * scale, 1e-12);   // |err| + the tie's share
  q.at(0, 0, 0, 1) = 1.25;   // 1.25 / 2 = 0.625: code 1, no tie left, so the bound is the error itself
  const double hat = 14.0 * 7 + 2.0 * 6 + 2.0 * 5, truth = 14.0 * 7 + 1.25 * 6 + 1.5 * 5;
  EXPECT_NEAR(score_error_bound(q, k, Gran::per_token, 0, false, false, 7)[0], std::fabs(hat - truth) * scale, 1e-12);
}

// e4m3 codes (fp8): a Q element at the midpoint between two e4m3 values may come out as either (the kernel
// forms x / scale in fp32); the bound covers both, and off the midpoint it is the error itself.
TEST(ScoreErrorBound, Fp8CoversEitherE4m3NeighbourAtAMidpoint) {
  HostTensor q = HostTensor::zeros({1, 1, 1, 8}), k = HostTensor::zeros({1, 1, 1, 8});
  q.at(0, 0, 0, 0) = 448.0;   // abs-max 448: scale 1, codes are the values
  q.at(0, 0, 0, 1) = 17.0;    // between 16 and 18 (step 2 in [16, 32)): a midpoint, reference code 16 (even)
  q.at(0, 0, 0, 2) = 17.5;    // no midpoint: code 18, +0.5
  for (int c = 0; c < 8; ++c) k.at(0, 0, 0, c) = c == 0 ? 448.0 : 0.0;
  k.at(0, 0, 0, 1) = k.at(0, 0, 0, 2) = 4.0;   // e4m3-exact, so K adds no error
  const double scale = 1.0 / std::sqrt(8.0);
  // The reference's code errs by -4 and element 2 by +2 (|sum| 2); the other neighbour errs by +4 (|sum| 6).
  const double exact = 448.0 * 448.0 + 17.0 * 4.0 + 17.5 * 4.0;
  const double even = 448.0 * 448.0 + 16.0 * 4.0 + 18.0 * 4.0, other = 448.0 * 448.0 + 18.0 * 4.0 + 18.0 * 4.0;
  const std::vector<double> bound = score_error_bound(q, k, Gran::per_token, 0, false, false, 127, false, 0, false, true);
  ASSERT_EQ(bound.size(), 1u);
  EXPECT_GE(bound[0] + 1e-9, std::fabs(even - exact) * scale);
  EXPECT_GE(bound[0] + 1e-9, std::fabs(other - exact) * scale);
  q.at(0, 0, 0, 1) = 16.5;    // nearest 16, no midpoint: the bound is the error alone, |-2 + 2| = 0
  EXPECT_NEAR(score_error_bound(q, k, Gran::per_token, 0, false, false, 127, false, 0, false, true)[0], 0.0, 1e-9);
}

}  // namespace
}  // namespace test
}  // namespace qattn

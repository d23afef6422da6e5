// TurboAttention's SAS exponential as the decode kernel computes it (templates/qattn/decode/sas.h),
// through the host's step-for-step fp16 emulation: error bound on a dense grid, exact zeros at and
// below the threshold.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "qattn/decode/sas.h"
#include "tests/common/sas_reference.hpp"

namespace qattn {
namespace {

TEST(Sas, WithinOneThousandthOfExpOnADenseGrid) {
  double max_abs = 0, max_rel = 0;
  int points = 0;
  for (int i = 0; i < 600000; ++i) {   // (-6, 0] in steps of 1e-5
    const float x = static_cast<float>(-i * 1e-5);
    const double got = test::sas_exp(x), want = std::exp(static_cast<double>(x));
    max_abs = std::max(max_abs, std::fabs(got - want));
    max_rel = std::max(max_rel, std::fabs(got - want) / want);
    ++points;
  }
  std::printf("SAS on (-6, 0], %d points: max abs error %.3g, max rel error %.3g\n", points, max_abs, max_rel);
  EXPECT_LE(max_abs, 1e-3);
  EXPECT_LE(max_rel, 5e-3);
}

TEST(Sas, ZeroAtAndBelowTheThreshold) {
  for (float x : {sas::kThreshold, -6.0001f, -7.f, -100.f, -std::numeric_limits<float>::infinity()})
    EXPECT_EQ(test::sas_exp(x), 0.0) << x;
  // Just above it the LUT's last entry applies and the value is e^-6-ish, not 0.
  EXPECT_NEAR(test::sas_exp(-5.9999f), std::exp(-5.9999), 1e-4);
  EXPECT_NEAR(test::sas_exp(0.f), 1.0, 1e-3);
}

TEST(Sas, EveryLutSegmentIsContinuousAtItsEdges) {
  // At x = -n the fraction is 0 on one side and ~-1 on the other: both must give ~e^-n.
  for (int n = 1; n < sas::kLutSize; ++n) {
    const float at = static_cast<float>(-n), above = std::nextafter(at, 0.f);
    EXPECT_NEAR(test::sas_exp(at), test::sas_exp(above), 2e-3 * std::exp(-n + 1.0)) << n;
  }
}

}  // namespace
}  // namespace qattn

// reference/metrics.hpp: each metric on vectors whose values are known, and non-finite results.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "reference/metrics.hpp"

namespace qattn::reference {
namespace {

TEST(ReferenceMetrics, KnownValues) {
  const std::vector<double> ref = {3, 4}, got = {3, 5};
  const ErrorMetrics m = compare(ref, got);
  EXPECT_EQ(m.count, 2);
  EXPECT_EQ(m.nonfinite, 0);
  EXPECT_NEAR(m.cosine, 29.0 / (5.0 * std::sqrt(34.0)), 1e-15);
  EXPECT_NEAR(m.rel_l2, 1.0 / 5.0, 1e-15);
  EXPECT_NEAR(m.rel_l1, 1.0 / 7.0, 1e-15);
  EXPECT_EQ(m.max_abs, 1.0);
  EXPECT_NEAR(m.rmse, std::sqrt(0.5), 1e-15);
  EXPECT_EQ(compare(ref, ref).cosine, 1.0);
  EXPECT_EQ(compare(std::vector<double>{0, 0}, std::vector<double>{0, 0}).cosine, 1.0);
}

TEST(ReferenceMetrics, FloatResultsAsTheirDoubles) {
  const std::vector<double> ref = {0.1, -2.5, 7.0};
  const std::vector<float> got = {0.1f, -2.4f, 7.0f};
  const ErrorMetrics a = compare(ref, got);
  const ErrorMetrics b = compare(ref, std::vector<double>(got.begin(), got.end()));
  EXPECT_EQ(a.cosine, b.cosine);
  EXPECT_EQ(a.max_abs, b.max_abs);
  EXPECT_THROW(compare(ref, std::vector<float>{1.f}), std::invalid_argument);
}

TEST(ReferenceMetrics, NonFiniteResultsAreCountedAndPoisonTheMetrics) {
  const std::vector<double> ref = {1, 2, 3};
  const std::vector<float> got = {1, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()};
  const ErrorMetrics m = compare(ref, got);
  EXPECT_EQ(m.nonfinite, 2);
  EXPECT_TRUE(std::isnan(m.cosine));
  EXPECT_TRUE(std::isnan(m.max_abs));
  EXPECT_FALSE(m.cosine >= 0.99);   // any threshold test fails
}

}  // namespace
}  // namespace qattn::reference

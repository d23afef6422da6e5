#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/common/metrics.hpp"

namespace qattn {
namespace test {
namespace {

TEST(Metrics, KnownVectors) {
  const std::vector<double> ref = {1, 2, 3, 4}, got = {1, 2, 3, 5};
  const ErrorMetrics m = compare(ref, got);
  EXPECT_EQ(m.count, 4);
  EXPECT_EQ(m.nonfinite, 0);
  EXPECT_NEAR(m.cosine, 34.0 / std::sqrt(30.0 * 39.0), 1e-15);
  EXPECT_NEAR(m.rel_l2, 1.0 / std::sqrt(30.0), 1e-15);
  EXPECT_NEAR(m.rel_l1, 0.1, 1e-15);
  EXPECT_EQ(m.max_abs, 1.0);
  EXPECT_NEAR(m.rmse, 0.5, 1e-15);
  const std::string r = m.report();
  for (const char* key : {"cos=", "relL2=", "relL1=", "maxAbs=", "rmse=", "nonfinite=0"})
    EXPECT_NE(r.find(key), std::string::npos) << r;
}

TEST(Metrics, OppositeAndIdenticalVectors) {
  const std::vector<double> a = {0.5, -1.5, 2.0}, neg = {-0.5, 1.5, -2.0};
  const ErrorMetrics same = compare(a, a);
  EXPECT_NEAR(same.cosine, 1.0, 1e-15);
  EXPECT_EQ(same.rel_l2, 0.0);
  EXPECT_EQ(same.max_abs, 0.0);
  const ErrorMetrics opp = compare(a, neg);
  EXPECT_NEAR(opp.cosine, -1.0, 1e-15);
  EXPECT_NEAR(opp.rel_l2, 2.0, 1e-15);
  EXPECT_NEAR(opp.rel_l1, 2.0, 1e-15);
  EXPECT_EQ(opp.max_abs, 4.0);
}

TEST(Metrics, NonFiniteResultsAreCountedAndPoisonTheMetrics) {
  const std::vector<double> ref = {1, 2, 3};
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> got = {1, nan, inf};
  const ErrorMetrics m = compare(ref, got);
  EXPECT_EQ(m.nonfinite, 2);
  EXPECT_TRUE(std::isnan(m.cosine));
  EXPECT_TRUE(std::isnan(m.max_abs));
  EXPECT_FALSE(m.rel_l2 <= 1e-3);   // a threshold test must fail
}

TEST(Metrics, ZeroReference) {
  const std::vector<double> zero = {0, 0}, one = {0, 1};
  const ErrorMetrics both = compare(zero, zero);
  EXPECT_EQ(both.cosine, 1.0);
  EXPECT_EQ(both.rel_l2, 0.0);
  const ErrorMetrics m = compare(zero, one);
  EXPECT_EQ(m.cosine, 0.0);
  EXPECT_TRUE(std::isinf(m.rel_l2));
  EXPECT_EQ(m.max_abs, 1.0);
}

TEST(Metrics, TensorsCompareByLogicalIndex) {
  HostTensor a = HostTensor::zeros(Shape{1, 2, 3, 2}, Layout::bhsd);
  for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = 1.0 + static_cast<double>(i);
  const HostTensor b = a.relayout(Layout::bshd);
  ASSERT_NE(a.data, b.data);   // storage order really differs
  const ErrorMetrics m = compare(a, b);
  EXPECT_EQ(m.max_abs, 0.0);
  EXPECT_EQ(m.count, 12);
  EXPECT_THROW(compare(a, HostTensor::zeros(Shape{1, 2, 2, 3})), std::invalid_argument);
}

}  // namespace
}  // namespace test
}  // namespace qattn

// The random tensors really carry the outliers the tests rely on, and seeds replay exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tests/common/quant_reference.hpp"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace test {
namespace {

// Per-channel mean and standard deviation over every (b, h, s).
void channel_moments(const HostTensor& t, std::vector<double>& mean, std::vector<double>& sd) {
  const Shape& s = t.shape;
  mean.assign(s.dim, 0.0);
  sd.assign(s.dim, 0.0);
  const double n = static_cast<double>(s.batch) * s.heads * s.seq;
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads; ++h)
      for (int i = 0; i < s.seq; ++i)
        for (int c = 0; c < s.dim; ++c) mean[c] += t.at(b, h, i, c) / n;
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads; ++h)
      for (int i = 0; i < s.seq; ++i)
        for (int c = 0; c < s.dim; ++c) sd[c] += std::pow(t.at(b, h, i, c) - mean[c], 2) / n;
  for (double& v : sd) v = std::sqrt(v);
}

TEST(RandomData, SameSeedSameDataNewSeedNewData) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const Shape shape{1, 2, 16, 32};
  const HostTensor a = random_tensor(shape, Layout::bhsd, k_like(), seed);
  EXPECT_EQ(a.data, random_tensor(shape, Layout::bhsd, k_like(), seed).data);
  EXPECT_NE(a.data, random_tensor(shape, Layout::bhsd, k_like(), seed + 1).data);
  // The layout changes storage, not values.
  EXPECT_EQ(a.logical(), random_tensor(shape, Layout::bshd, k_like(), seed).logical());
}

TEST(RandomData, OutlierChannelsArePresent) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const Shape shape{1, 4, 512, 64};
  std::vector<double> mean, sd;

  channel_moments(random_tensor(shape, Layout::bhsd, k_like(), seed), mean, sd);
  int biased = 0;
  for (int c = 0; c < shape.dim; ++c) {
    const double m = std::fabs(mean[c]);
    if (m > 4.5) {
      ++biased;
      EXPECT_LE(m, 20.5);
    } else {
      EXPECT_LT(m, 0.3);
    }
    EXPECT_NEAR(sd[c], 1.0, 0.1);
  }
  EXPECT_EQ(biased, 4);

  channel_moments(random_tensor(shape, Layout::bhsd, q_like(), seed), mean, sd);
  int large = 0;
  for (int c = 0; c < shape.dim; ++c) large += sd[c] > 8.0;
  EXPECT_EQ(large, 4);

  channel_moments(random_tensor(shape, Layout::bhsd, plain(Dist::uniform), seed), mean, sd);
  for (int c = 0; c < shape.dim; ++c) EXPECT_NEAR(sd[c], std::sqrt(1.0 / 12.0), 0.02);
  const HostTensor u = random_tensor(shape, Layout::bhsd, plain(Dist::uniform), seed);
  EXPECT_LE(*std::max_element(u.data.begin(), u.data.end()), 0.5);
  EXPECT_GE(*std::min_element(u.data.begin(), u.data.end()), -0.5);
}

}  // namespace
}  // namespace test
}  // namespace qattn

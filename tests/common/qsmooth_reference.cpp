#include "tests/common/qsmooth_reference.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "qattn/abi.h"

namespace qattn {
namespace test {

int q_mean_blocks(int seq) { return (seq + kQMeanBlock - 1) / kQMeanBlock; }

std::vector<double> q_block_means(const HostTensor& q) {
  const Shape& sh = q.shape;
  const int nb = q_mean_blocks(sh.seq);
  std::vector<double> means(static_cast<size_t>(sh.batch) * sh.heads * nb * sh.dim, 0.0);
  for (int b = 0; b < sh.batch; ++b)
    for (int h = 0; h < sh.heads; ++h)
      for (int k = 0; k < nb; ++k) {
        const int first = k * kQMeanBlock, last = std::min(sh.seq, first + kQMeanBlock);
        double* m = &means[((static_cast<size_t>(b) * sh.heads + h) * nb + k) * sh.dim];
        for (int s = first; s < last; ++s)
          for (int c = 0; c < sh.dim; ++c) m[c] += q.at(b, h, s, c);
        for (int c = 0; c < sh.dim; ++c) m[c] /= (last - first);
      }
  return means;
}

HostTensor subtract_q_block_means(const HostTensor& q, const std::vector<double>& means) {
  const Shape& sh = q.shape;
  const int nb = q_mean_blocks(sh.seq);
  HostTensor out = HostTensor::zeros(sh);
  for (int b = 0; b < sh.batch; ++b)
    for (int h = 0; h < sh.heads; ++h)
      for (int s = 0; s < sh.seq; ++s) {
        const double* m = &means[((static_cast<size_t>(b) * sh.heads + h) * nb + s / kQMeanBlock) * sh.dim];
        for (int c = 0; c < sh.dim; ++c) out.at(b, h, s, c) = q.at(b, h, s, c) - m[c];
      }
  return out;
}

MeanCodes quantize_mean(const double* mean, int d) {
  MeanCodes m;
  m.hi.assign(static_cast<size_t>(d), 0);
  m.lo.assign(static_cast<size_t>(d), 0);
  double amax = 0;
  for (int c = 0; c < d; ++c) amax = std::max(amax, std::fabs(mean[c]));
  if (amax == 0) return m;
  m.scale = amax / 127.0;
  auto code = [](double x) { return static_cast<int>(std::clamp(std::nearbyint(x), -127.0, 127.0)); };
  for (int c = 0; c < d; ++c) {
    const double x = mean[c] * (127.0 / amax);
    m.hi[static_cast<size_t>(c)] = code(x);
    m.lo[static_cast<size_t>(c)] = code((x - std::nearbyint(x)) * 254.0);
  }
  return m;
}

HostTensor q_block_offset_data(const Shape& shape, Layout layout, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> size(10.0, 20.0);
  const int d = shape.dim, n_large = std::min(4, d / 8), n_biased = std::min(8, d / 4);
  // Channel roles: the first n_large of a shuffled order are large, the next n_biased carry the bias.
  std::vector<int> order(static_cast<size_t>(d));
  for (int c = 0; c < d; ++c) order[static_cast<size_t>(c)] = c;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<double> gain(static_cast<size_t>(d), 1.0), sign(static_cast<size_t>(d), 0.0);
  for (int i = 0; i < n_large; ++i) gain[static_cast<size_t>(order[static_cast<size_t>(i)])] = 4.0;
  for (int i = 0; i < n_biased; ++i) sign[static_cast<size_t>(order[static_cast<size_t>(n_large + i)])] = i % 2 ? -1.0 : 1.0;
  HostTensor t = HostTensor::zeros(shape, layout);
  std::vector<double> offset(static_cast<size_t>(d));
  for (int b = 0; b < shape.batch; ++b)
    for (int h = 0; h < shape.heads; ++h)
      for (int s = 0; s < shape.seq; ++s) {
        if (s % kQMeanBlock == 0)
          for (int c = 0; c < d; ++c)
            offset[static_cast<size_t>(c)] = sign[static_cast<size_t>(c)] * size(rng) + 2.0 * normal(rng);
        for (int c = 0; c < d; ++c)
          t.at(b, h, s, c) = gain[static_cast<size_t>(c)] * normal(rng) + offset[static_cast<size_t>(c)];
      }
  return t;
}

}  // namespace test
}  // namespace qattn

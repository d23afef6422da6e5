#include "tests/common/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace qattn {
namespace test {

namespace {

double ratio(double num, double den) {
  if (den == 0.0) return num == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return num / den;
}

}  // namespace

std::string ErrorMetrics::report() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "n=%lld cos=%.9f relL2=%.3e relL1=%.3e maxAbs=%.3e rmse=%.3e nonfinite=%lld",
                count, cosine, rel_l2, rel_l1, max_abs, rmse, nonfinite);
  return buf;
}

ErrorMetrics compare(const double* ref, const double* got, long long n) {
  ErrorMetrics m;
  m.count = n;
  double dot = 0, rr = 0, gg = 0, d2 = 0, d1 = 0, r1 = 0, dmax = 0;
  for (long long i = 0; i < n; ++i) {
    const double r = ref[i], g = got[i], d = g - r;
    if (!std::isfinite(g)) ++m.nonfinite;
    dot += r * g;
    rr += r * r;
    gg += g * g;
    d2 += d * d;
    d1 += std::fabs(d);
    r1 += std::fabs(r);
    // std::max would drop a NaN difference; once one is seen, the maximum stays NaN.
    if (std::isnan(d)) {
      dmax = d;
    } else if (!std::isnan(dmax)) {
      dmax = std::max(dmax, std::fabs(d));
    }
  }
  if (rr == 0.0 && gg == 0.0 && std::isfinite(dot)) {
    m.cosine = 1.0;
  } else {
    m.cosine = (rr == 0.0 || gg == 0.0) ? 0.0 : dot / (std::sqrt(rr) * std::sqrt(gg));
    if (std::isnan(dot) || std::isnan(gg)) m.cosine = std::numeric_limits<double>::quiet_NaN();
  }
  m.rel_l2 = ratio(std::sqrt(d2), std::sqrt(rr));
  m.rel_l1 = ratio(d1, r1);
  m.max_abs = dmax;
  m.rmse = n > 0 ? std::sqrt(d2 / static_cast<double>(n)) : 0.0;
  return m;
}

ErrorMetrics compare(const std::vector<double>& ref, const std::vector<double>& got) {
  if (ref.size() != got.size()) throw std::invalid_argument("compare: reference and result sizes differ");
  return compare(ref.data(), got.data(), static_cast<long long>(ref.size()));
}

ErrorMetrics compare(const HostTensor& ref, const HostTensor& got) {
  const Shape& a = ref.shape;
  const Shape& b = got.shape;
  if (a.batch != b.batch || a.heads != b.heads || a.seq != b.seq || a.dim != b.dim)
    throw std::invalid_argument("compare: tensor shapes differ");
  return compare(ref.logical(), got.logical());
}

}  // namespace test
}  // namespace qattn

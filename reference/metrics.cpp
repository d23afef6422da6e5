#include "reference/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

namespace qattn::reference {

namespace {

double ratio(double num, double den) {
  if (den == 0.0) return num == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return num / den;
}

template <class T>
ErrorMetrics compare_any(const double* ref, const T* got, long long n) {
  ErrorMetrics m;
  m.count = n;
  double dot = 0, rr = 0, gg = 0, d2 = 0, d1 = 0, r1 = 0, dmax = 0;
  for (long long i = 0; i < n; ++i) {
    const double r = ref[i], g = static_cast<double>(got[i]), d = g - r;
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

template <class T>
ErrorMetrics compare_vectors(const std::vector<double>& ref, const std::vector<T>& got) {
  if (ref.size() != got.size())
    throw std::invalid_argument("compare: reference has " + std::to_string(ref.size()) + " values, result " +
                                std::to_string(got.size()));
  return compare_any(ref.data(), got.data(), static_cast<long long>(ref.size()));
}

}  // namespace

std::string ErrorMetrics::report() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "n=%lld cos=%.9f relL2=%.3e relL1=%.3e maxAbs=%.3e rmse=%.3e nonfinite=%lld",
                count, cosine, rel_l2, rel_l1, max_abs, rmse, nonfinite);
  return buf;
}

ErrorMetrics compare(const double* ref, const double* got, long long n) { return compare_any(ref, got, n); }
ErrorMetrics compare(const double* ref, const float* got, long long n) { return compare_any(ref, got, n); }
ErrorMetrics compare(const std::vector<double>& ref, const std::vector<double>& got) {
  return compare_vectors(ref, got);
}
ErrorMetrics compare(const std::vector<double>& ref, const std::vector<float>& got) {
  return compare_vectors(ref, got);
}

}  // namespace qattn::reference

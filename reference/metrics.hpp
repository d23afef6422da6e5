// Error metrics between a float64 reference and a result, computed in float64.
// Non-finite results are counted and also propagate into the metrics (a NaN makes them NaN), so a
// threshold test on any metric fails when the result holds a NaN or inf.
#pragma once
#include <string>
#include <vector>

namespace qattn::reference {

struct ErrorMetrics {
  long long count = 0;
  long long nonfinite = 0;   // non-finite values in the result
  double cosine = 0;         // <ref, got> / (|ref| |got|); 1 when both are all zero
  double rel_l2 = 0;         // |got - ref|_2 / |ref|_2   (0/0 = 0, x/0 = inf)
  double rel_l1 = 0;         // |got - ref|_1 / |ref|_1
  double max_abs = 0;        // max |got - ref|
  double rmse = 0;           // sqrt(mean (got - ref)^2)

  // "n=.. cos=.. relL2=.. relL1=.. maxAbs=.. rmse=.. nonfinite=.."
  std::string report() const;
};

ErrorMetrics compare(const double* ref, const double* got, long long n);
ErrorMetrics compare(const double* ref, const float* got, long long n);
// Sizes must match (std::invalid_argument otherwise).
ErrorMetrics compare(const std::vector<double>& ref, const std::vector<double>& got);
ErrorMetrics compare(const std::vector<double>& ref, const std::vector<float>& got);

}  // namespace qattn::reference

#include "tests/common/sas_reference.hpp"

#include <algorithm>
#include <cmath>

#include "qattn/decode/sas.h"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace test {
namespace {

double round16(double x) { return fp16_bits_to_double(to_fp16_bits(x)); }

}  // namespace

double sas_exp(float x) {
  if (!(x > sas::kThreshold)) return 0.0;
  const int n = std::min(sas::kLutSize - 1, static_cast<int>(std::floor(-x)));
  const double f = round16(static_cast<double>(x + static_cast<float>(n)));   // the fp32 add is exact
  double p = round16(round16(sas::kC3) * f + round16(sas::kC2));
  p = round16(p * f + round16(sas::kC1));
  p = round16(p * f + round16(sas::kC0));
  return round16(p * round16(sas::kLut[n]));
}

}  // namespace test
}  // namespace qattn

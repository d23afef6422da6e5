#include "tests/common/unified_max_reference.hpp"

#include <algorithm>
#include <cmath>

#include "qattn/abi.h"

namespace qattn {
namespace test {
namespace {

// [begin, end) of range r when n keys are cut into `splits` ranges of ceil(n / splits).
void range_of(int n, int splits, int r, int& begin, int& end) {
  const int per = (n + splits - 1) / splits;
  begin = std::min(n, r * per);
  end = std::min(n, begin + per);
}

}  // namespace

int unified_max_flags(const std::vector<double>& x, double phi, double lo, double hi) {
  int flags = 0;
  for (double s : x) {
    if (s == -INFINITY) continue;   // masked keys never count
    if (s - phi >= hi) flags |= kUmOverflow;
    if (s - phi > lo) flags |= kUmSeen;
  }
  return flags;
}

SoftmaxRow exact_softmax_row(const std::vector<double>& x, const std::vector<double>& v, int dv, int splits) {
  const int n = static_cast<int>(x.size());
  double m = -INFINITY, l = 0;
  std::vector<double> o(static_cast<size_t>(dv), 0.0);
  for (int r = 0; r < splits; ++r) {
    int begin, end;
    range_of(n, splits, r, begin, end);
    double mr = -INFINITY, lr = 0;
    std::vector<double> orr(static_cast<size_t>(dv), 0.0);
    for (int i = begin; i < end; ++i) mr = std::max(mr, x[static_cast<size_t>(i)]);
    if (mr == -INFINITY) continue;   // nothing visible in this range
    for (int i = begin; i < end; ++i) {
      const double p = std::exp(x[static_cast<size_t>(i)] - mr);
      lr += p;
      for (int c = 0; c < dv; ++c) orr[static_cast<size_t>(c)] += p * v[static_cast<size_t>(i) * dv + c];
    }
    // The synchronized merge: both sides rescaled to the larger max.
    const double mn = std::max(m, mr);
    const double a = m == -INFINITY ? 0.0 : std::exp(m - mn), b = std::exp(mr - mn);
    l = l * a + lr * b;
    for (int c = 0; c < dv; ++c) o[static_cast<size_t>(c)] = o[static_cast<size_t>(c)] * a + orr[static_cast<size_t>(c)] * b;
    m = mn;
  }
  SoftmaxRow row;
  row.out.assign(static_cast<size_t>(dv), 0.0);
  row.lse = -INFINITY;
  if (l > 0) {
    for (int c = 0; c < dv; ++c) row.out[static_cast<size_t>(c)] = o[static_cast<size_t>(c)] / l;
    row.lse = m + std::log(l);
  }
  return row;
}

SoftmaxRow unified_max_row(const std::vector<double>& x, const std::vector<double>& v, int dv, double phi,
                           double lo, double hi, int splits) {
  const int n = static_cast<int>(x.size());
  double l = 0;
  std::vector<double> o(static_cast<size_t>(dv), 0.0);
  int flags = 0;
  for (int r = 0; r < splits; ++r) {   // every range on its own: no state shared but the flags word
    int begin, end;
    range_of(n, splits, r, begin, end);
    const std::vector<double> xr(x.begin() + begin, x.begin() + end);
    flags |= unified_max_flags(xr, phi, lo, hi);
    double lr = 0;
    std::vector<double> orr(static_cast<size_t>(dv), 0.0);
    for (int i = begin; i < end; ++i) {
      const double p = std::exp(x[static_cast<size_t>(i)] - phi);   // e^-inf = 0 for masked keys
      lr += p;
      for (int c = 0; c < dv; ++c) orr[static_cast<size_t>(c)] += p * v[static_cast<size_t>(i) * dv + c];
    }
    l += lr;   // the combine: plain sums
    for (int c = 0; c < dv; ++c) o[static_cast<size_t>(c)] += orr[static_cast<size_t>(c)];
  }
  SoftmaxRow row;
  if (flags != kUmSeen) {
    row = exact_softmax_row(x, v, dv, splits);
  } else {
    row.out.resize(static_cast<size_t>(dv));
    for (int c = 0; c < dv; ++c) row.out[static_cast<size_t>(c)] = o[static_cast<size_t>(c)] / l;
    row.lse = phi + std::log(l);
  }
  row.flags = flags;
  row.fallback = flags != kUmSeen;
  return row;
}

}  // namespace test
}  // namespace qattn

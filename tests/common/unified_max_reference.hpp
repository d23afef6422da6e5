// Float64 model of decode's unified-max softmax (FlashDecoding++; include/qattn/unified_max.hpp) over
// one attention row: the flag rule, the split partials (plain sums against phi, no max, no rescale),
// their combine by summation, and the exact fallback for the rows the flags send back.
//
// Scores are x = softmax_scale * q.k in natural-log units, -inf for a masked key. Flags are the
// kernel's bits (qattn/abi.h): kUmOverflow when some unmasked x - phi >= hi, kUmSeen when some unmasked
// x - phi > lo; a row keeps its unified-max result only when its flags are exactly kUmSeen.
#pragma once
#include <vector>

namespace qattn {
namespace test {

int unified_max_flags(const std::vector<double>& x, double phi, double lo, double hi);

struct SoftmaxRow {
  std::vector<double> out;   // [dv]: sum_i softmax(x)_i v_i (zeros for a fully masked row)
  double lse = 0;            // natural-log log-sum-exp of x (-inf for a fully masked row)
  int flags = 0;             // unified max: the OR of the splits' flags
  bool fallback = false;     // unified max: flags != kUmSeen, out and lse are exact_softmax_row's
};

// The keys cut into `splits` contiguous ranges of ceil(n / splits) keys (the last ones may be shorter
// or empty), like the kernel's split-K grid. v: [n][dv] row-major.
// Exact: FlashDecoding's synchronized partial softmax (each range's running max, merged with rescales).
SoftmaxRow exact_softmax_row(const std::vector<double>& x, const std::vector<double>& v, int dv, int splits);
// Unified max: per range sum e^(x - phi) v and sum e^(x - phi) and the range's flags; the sums of all
// ranges divided once. Rows whose flags are not kUmSeen are replaced by exact_softmax_row.
SoftmaxRow unified_max_row(const std::vector<double>& x, const std::vector<double>& v, int dv, double phi,
                           double lo, double hi, int splits);

}  // namespace test
}  // namespace qattn

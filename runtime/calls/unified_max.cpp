// Unified-max softmax (include/qattn/unified_max.hpp): the P operand's windows, the calibration of phi
// and the checks decode() applies.
#include "qattn/unified_max.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "qattn/error.hpp"

namespace qattn {
namespace {

std::string num(double x) {
  std::ostringstream os;
  os.precision(4);
  os << x;
  return os.str();
}

template <class T>
UnifiedMaxCalibration calibrate(const T* values, std::size_t count, const UnifiedMaxCalibrationOptions& o) {
  const UnifiedMaxWindow w = o.window;
  if (!(o.coverage > 0 && o.coverage <= 1))
    throw_bad_input("calibrate_unified_max: coverage " + num(o.coverage) + " is outside (0, 1]; e.g. 0.9999");
  if (!std::isfinite(w.lo) || !std::isfinite(w.hi) || !(w.lo < w.hi))
    throw_bad_input("calibrate_unified_max: window (" + num(w.lo) + ", " + num(w.hi) +
                    ") must be finite with lo < hi; e.g. unified_max_window(Fmt::fp16) = (-9, 8)");
  if (!(o.min_headroom >= 0)) throw_bad_input("calibrate_unified_max: min_headroom must be >= 0");
  if (!(o.keys_per_row >= 1)) throw_bad_input("calibrate_unified_max: keys_per_row must be >= 1 (the longest row's keys)");

  // x: the samples; low: each sample's lower bound on its row's maximum (row_lse: lse - ln keys).
  std::vector<double> x, low;
  x.reserve(count);
  low.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const double v = static_cast<double>(values[i]);
    if (v == -INFINITY) continue;   // a fully masked row: nothing to place
    if (!std::isfinite(v))
      throw_bad_input("calibrate_unified_max: sample " + std::to_string(i) + " is " + num(v) + "; samples must be finite or -inf");
    double keys = 1;
    if (o.sample == ScoreSample::row_lse) {
      keys = o.row_keys ? o.row_keys[i] : o.keys_per_row;
      if (!(keys >= 1))
        throw_bad_input("calibrate_unified_max: sample " + std::to_string(i) + " has " + num(keys) + " keys; a row has >= 1");
    }
    x.push_back(v);
    low.push_back(v - std::log(keys));
  }
  if (x.empty()) throw_bad_input("calibrate_unified_max: no finite sample");

  // The central interval holding >= coverage of the samples: drop floor(n (1 - coverage) / 2) from each
  // end (with few samples that is none: the interval is [min, max]); the 1e-9 absorbs the rounding of
  // 1 - coverage (1 - 0.9 is 0.0999...).
  UnifiedMaxCalibration c;
  c.samples = static_cast<long long>(x.size());
  const std::size_t n = x.size();
  const std::size_t tail = static_cast<std::size_t>(std::floor(static_cast<double>(n) * (1 - o.coverage) / 2 + 1e-9));
  auto nth = [](std::vector<double>& v, std::size_t k) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
  };
  c.interval_lo = nth(x, tail);
  c.interval_hi = nth(x, n - 1 - tail);
  c.max_lo = nth(low, tail);
  c.max_hi = c.interval_hi;

  // phi centres [max_lo, max_hi] in the window: phi = max_hi - (hi - slack / 2), the upper edge of the
  // maxima minus a margin. Both exits of the window cost the same (a recomputed row), and what triggers
  // them is the tails of the maxima beyond the calibrated interval, so the phi that keeps the most room
  // on the tighter side gives both sides the same room. (The paper's phi = the interval's lower or upper
  // edge assumes an fp32 P with room to spare; our fp16 P has none.)
  const double slack = (w.hi - w.lo) - (c.max_hi - c.max_lo);
  c.headroom = slack / 2;
  c.params.phi = static_cast<float>(c.max_hi - (w.hi - c.headroom));
  c.params.lo = static_cast<float>(w.lo);
  c.params.hi = static_cast<float>(w.hi);
  c.enabled = c.headroom >= o.min_headroom;
  c.params.enabled = c.enabled;
  if (!c.enabled)
    c.reason = "the row maxima span [" + num(c.max_lo) + ", " + num(c.max_hi) + "] (width " + num(c.max_hi - c.max_lo) +
               "), which does not fit the window (" + num(w.lo) + ", " + num(w.hi) + ") of width " + num(w.hi - w.lo) +
               " with " + num(o.min_headroom) + " to spare on each side; use the exact softmax";
  return c;
}

}  // namespace

Fmt unified_max_p_type(const Spec& s) { return s.qk.fmt == Fmt::bf16 ? Fmt::bf16 : Fmt::fp16; }

UnifiedMaxWindow unified_max_window(Fmt p_type) {
  if (p_type == Fmt::bf16) return UnifiedMaxWindow{-40, 40};
  return UnifiedMaxWindow{-9, 8};
}

UnifiedMaxWindow unified_max_limits(Fmt p_type) {
  if (p_type == Fmt::bf16) return UnifiedMaxWindow{-64, 64};
  return UnifiedMaxWindow{std::log(0x1p-14), std::log(65504.0)};
}

UnifiedMaxCalibration calibrate_unified_max(const double* values, std::size_t count, const UnifiedMaxCalibrationOptions& options) {
  return calibrate(values, count, options);
}

UnifiedMaxCalibration calibrate_unified_max(const float* values, std::size_t count, const UnifiedMaxCalibrationOptions& options) {
  return calibrate(values, count, options);
}

long long count_fallback_rows(const int* flags, std::size_t rows) {
  long long n = 0;
  for (std::size_t i = 0; i < rows; ++i) n += flags[i] != kUmSeen;
  return n;
}

void check_unified_max(const Spec& s, const UnifiedMax& um) {
  if (!um.enabled) return;   // decode() runs the exact softmax; phi and the window are not used
  if (!std::isfinite(um.phi) || !std::isfinite(um.lo) || !std::isfinite(um.hi) || !(um.lo < um.hi))
    throw_bad_input("softmax=unified_max: phi " + num(um.phi) + " and window (" + num(um.lo) + ", " + num(um.hi) +
                    ") must be finite with lo < hi (calibrate_unified_max gives them)");
  const Fmt p = unified_max_p_type(s);
  const UnifiedMaxWindow lim = unified_max_limits(p);
  if (um.lo < lim.lo || um.hi > lim.hi)
    throw_bad_input("softmax=unified_max: window (" + num(um.lo) + ", " + num(um.hi) + ") leaves the range (" + num(lim.lo) +
                    ", " + num(lim.hi) + ") the " + to_string(p) + " P operand of qk=" + to_string(s.qk.fmt) +
                    " holds; accepted: a window inside it (default (" + num(unified_max_window(p).lo) + ", " +
                    num(unified_max_window(p).hi) + "))");
}

}  // namespace qattn

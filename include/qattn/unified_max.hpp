// FlashDecoding++'s unified-max softmax for decode (`softmax=unified_max`): the parameters a decode
// call takes, the safe window of the P operand, and the offline calibration of phi. Pure host code.
//
// Units: x = softmax_scale * q.k, the score fed to exp (natural log). The kernel works in log2 units
// (x * log2 e); decode() converts.
//
// Convention. Every split exponentiates p = e^(x - phi) with one constant phi: no running max, no
// rescale of earlier partials, the partials are plain sums (FlashDecoding++ §3). A row falls back to
// the exact (running-max) kernel when
//   overflow:  some unmasked score has x - phi >= hi        (element-wise, as in the paper), or
//   underflow: no unmasked score of the row has x - phi > lo (judged on the row's maximum).
// Masked (-inf) scores never count. The underflow side deviates from the paper on purpose (the paper
// abandons a row at the first element with x - phi <= lo): our P enters the PV product as fp16, so what
// loses precision is a row whose largest P is tiny, not a row with a few tiny elements next to a healthy
// maximum (those weigh < e^(lo - hi) of it either way). Both conditions depend on the row's maximum
// alone, which is what calibrate_unified_max() places inside the window.
//
// How a decode call uses it (include/qattn/decode.hpp, docs/design/decode-kernels.md):
//   1. offline: calibrate_unified_max(row maxima or LSEs of exact runs) -> UnifiedMaxCalibration;
//   2. DecodeCall::unified_max = calibration.params with a `softmax=unified_max` spec;
//   3. decode() runs the unified-max kernel, then the exact kernel of the same tiling on the flagged
//      rows only, then the combine; Runtime::decode_fallback_rows() counts the recomputed rows.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "qattn/abi.h"
#include "qattn/export.h"
#include "qattn/spec.hpp"

QATTN_PUBLIC_BEGIN
namespace qattn {

// The unified max of a decode call, in units of x. The default window suits an fp16 P operand
// (unified_max_window); enabled = false (a calibration that found the scores too spread out) makes
// decode() run the exact softmax for every row.
struct UnifiedMax {
  float phi = 0;
  float lo = -9, hi = 8;   // the safe window on x - phi
  bool enabled = true;
};

// A window (lo, hi) on x - phi.
struct UnifiedMaxWindow {
  double lo = -9, hi = 8;
};

// Element type of P in a decode spec's PV product: bf16 for a bf16 cache, fp16 for every other one
// (fp16 caches, and the quantized caches, whose codes enter the tensor cores as fp16 integers).
Fmt unified_max_p_type(const Spec& decode_spec);

// The default window for P of type p_type (fp16 or bf16):
//   fp16 (-9, 8): every P stays <= e^8 ~ 2981, 22x below fp16's largest value 65504 (~e^11.09); the
//        factor is the room for the per-token V scales the int8/int4 paths fold into P before the
//        conversion. A row's largest P stays >= e^-9, above fp16's smallest normal 2^-14 ~ e^-9.70.
//   bf16 (-40, 40): bf16 has fp32's exponent range; e^40 ~ 2.4e17 leaves every fp32 sum of P and P*V
//        finite for up to 1e10 keys of |v| up to 1e10.
UnifiedMaxWindow unified_max_window(Fmt p_type);
// The widest window decode() accepts for p_type (bad_input beyond it): fp16 (ln 2^-14, ln 65504) =
// (-9.70, 11.09), where P leaves fp16's normal range; bf16 (-64, 64), where fp32 sums could overflow.
UnifiedMaxWindow unified_max_limits(Fmt p_type);

// What the calibration samples are.
enum class ScoreSample {
  row_maxima,   // the largest unmasked x of each row (what the fallback rule looks at)
  row_lse,      // each row's natural-log log-sum-exp (the `lse` output of an exact decode or prefill):
                // max <= lse <= max + ln(keys), so a row's maximum lies in [lse - ln(keys), lse] (keys:
                // the row's visible keys, row_keys, else keys_per_row)
  scores,       // every pre-exp score (the paper's Fig. 5 statistic); conservative: a row's maximum is
                // at least its smallest score, so the interval used is the whole score interval
};

struct UnifiedMaxCalibrationOptions {
  ScoreSample sample = ScoreSample::row_maxima;
  double coverage = 0.9999;         // the central interval holding this share of the samples
  UnifiedMaxWindow window;          // default: fp16 P (unified_max_window(Fmt::fp16))
  double min_headroom = 0.5;        // enabled only when the maxima sit >= this far inside both edges
  double keys_per_row = 1;          // row_lse: the longest row's key count (>= 1) ...
  const int* row_keys = nullptr;    // ... or each sample's own (`count` entries, each >= 1)
};

struct UnifiedMaxCalibration {
  bool enabled = false;
  UnifiedMax params;                // phi and the window, ready for DecodeCall::unified_max
  double interval_lo = 0, interval_hi = 0;   // the calibrated `coverage` interval of the samples
  double max_lo = 0, max_hi = 0;    // the range of row maxima it implies (see ScoreSample)
  double headroom = 0;              // distance of [max_lo, max_hi] from each window edge (may be < 0)
  long long samples = 0;            // finite samples used (-inf, a fully masked row, is skipped)
  std::string reason;               // why it is disabled; "" when enabled
};

// phi from observed samples (any order; -inf entries skipped; NaN or +inf: bad_input). Disabled when
// the implied maxima do not fit the window with min_headroom to spare on each side (the OPT-6.7B case:
// scores over a width of 860). Throws bad_input for no finite sample, coverage outside (0, 1], a window
// that is not finite or has lo >= hi, a negative headroom or keys_per_row < 1.
UnifiedMaxCalibration calibrate_unified_max(const double* values, std::size_t count,
                                            const UnifiedMaxCalibrationOptions& options = {});
UnifiedMaxCalibration calibrate_unified_max(const float* values, std::size_t count,
                                            const UnifiedMaxCalibrationOptions& options = {});
inline UnifiedMaxCalibration calibrate_unified_max(const std::vector<double>& values,
                                                   const UnifiedMaxCalibrationOptions& options = {}) {
  return calibrate_unified_max(values.data(), values.size(), options);
}
inline UnifiedMaxCalibration calibrate_unified_max(const std::vector<float>& values,
                                                   const UnifiedMaxCalibrationOptions& options = {}) {
  return calibrate_unified_max(values.data(), values.size(), options);
}

// Rows whose flags word (DecodeParams::row_flags) sends them to the exact kernel: flags != kUmSeen.
long long count_fallback_rows(const int* flags, std::size_t rows);

// Throws bad_input (one line) unless `um` is usable with the decode spec: finite, lo < hi, and inside
// unified_max_limits(unified_max_p_type(spec)). decode() calls it for softmax=unified_max.
void check_unified_max(const Spec& decode_spec, const UnifiedMax& um);

}  // namespace qattn
QATTN_PUBLIC_END

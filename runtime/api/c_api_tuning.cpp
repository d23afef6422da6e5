// The C API's decode tuning (Runtime::tune_decode) and unified-max calibration (calibrate_unified_max).
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "qattn/inflection.hpp"
#include "qattn/unified_max.hpp"
#include "runtime/api/c_api_internal.hpp"

namespace qattn::capi {
namespace {

constexpr size_t kTuneFirstSize = offsetof(qattn_tune_decode_options, tolerance) + sizeof(double);
constexpr size_t kUmOptionsFirstSize = offsetof(qattn_unified_max_options, row_keys) + sizeof(const int*);
constexpr size_t kUmResultFirstSize = offsetof(qattn_unified_max_calibration, reason) + 256;

qattn_tune_decode_options default_tune_options() {
  const SweepOptions d;
  qattn_tune_decode_options o{};
  o.struct_size = sizeof o;
  o.heads_kv = d.heads_kv;
  o.batch = d.batch;
  o.min_split_tokens = d.min_split_tokens;
  o.q_len = d.q_len;
  o.tolerance = d.tolerance;
  return o;
}

template <class T, class C>
void take_list(const C* values, int count, std::vector<T>& into, const char* name) {
  if (count < 0) throw_bad_input(std::string("options.") + name + "_count must be >= 0 (got " + std::to_string(count) + ")");
  if (count == 0) return;   // the default list
  if (!values) throw_bad_input(std::string("options.") + name + " is NULL with " + name + "_count " + std::to_string(count));
  into.assign(values, values + count);
}

SweepOptions sweep_options_of(const qattn_tune_decode_options* given) {
  const qattn_tune_decode_options o = read_versioned(given, default_tune_options(), kTuneFirstSize, "options");
  SweepOptions s;
  take_list(o.kv_lens, o.kv_lens_count, s.kv_lens, "kv_lens");
  take_list(o.rows, o.rows_count, s.rows, "rows");
  take_list(o.batch_heads, o.batch_heads_count, s.batch_heads, "batch_heads");
  take_list(o.splits, o.splits_count, s.splits, "splits");
  s.heads_kv = o.heads_kv;
  s.batch = o.batch;
  s.min_split_tokens = o.min_split_tokens;
  s.q_len = o.q_len;
  s.tolerance = o.tolerance;
  return s;
}

qattn_unified_max_options default_um_options() {
  const UnifiedMaxCalibrationOptions d;
  qattn_unified_max_options o{};
  o.struct_size = sizeof o;
  o.sample = static_cast<int>(d.sample);
  o.coverage = d.coverage;
  o.window_lo = d.window.lo;
  o.window_hi = d.window.hi;
  o.min_headroom = d.min_headroom;
  o.keys_per_row = d.keys_per_row;
  return o;
}

UnifiedMaxCalibrationOptions um_options_of(const qattn_unified_max_options* given) {
  const qattn_unified_max_options o =
      given ? read_versioned(given, default_um_options(), kUmOptionsFirstSize, "options") : default_um_options();
  if (o.sample < QATTN_SAMPLE_ROW_MAXIMA || o.sample > QATTN_SAMPLE_SCORES)
    throw_bad_input("options.sample " + std::to_string(o.sample) +
                    " is not a qattn_score_sample; accepted: 0 (row maxima), 1 (row lse), 2 (scores)");
  UnifiedMaxCalibrationOptions u;
  u.sample = static_cast<ScoreSample>(o.sample);
  u.coverage = o.coverage;
  u.window = UnifiedMaxWindow{o.window_lo, o.window_hi};
  u.min_headroom = o.min_headroom;
  u.keys_per_row = o.keys_per_row;
  u.row_keys = o.row_keys;
  return u;
}

void write_calibration(const UnifiedMaxCalibration& c, qattn_unified_max_calibration* out) {
  qattn_unified_max_calibration r{};
  r.struct_size = out->struct_size;
  r.enabled = c.enabled ? 1 : 0;
  r.params = qattn_unified_max{c.params.phi, c.params.lo, c.params.hi, c.params.enabled ? 1 : 0};
  r.interval_lo = c.interval_lo, r.interval_hi = c.interval_hi;
  r.max_lo = c.max_lo, r.max_hi = c.max_hi;
  r.headroom = c.headroom;
  r.samples = c.samples;
  copy_out(c.reason, r.reason, sizeof r.reason);
  std::memcpy(static_cast<void*>(out), &r, std::min(out->struct_size, sizeof r));
}

template <class V>
qattn_status calibrate(const V* values, size_t count, const qattn_unified_max_options* options, qattn_unified_max_calibration* out) {
  return guarded([&] {
    require_arg(out, "out");
    check_struct_size(out, out->struct_size, kUmResultFirstSize, out->struct_size, "out");
    if (!values && count > 0) throw_bad_input("values is NULL with count " + std::to_string(count));
    write_calibration(calibrate_unified_max(values, count, um_options_of(options)), out);
  });
}

}  // namespace
}  // namespace qattn::capi

using namespace qattn::capi;

extern "C" {

qattn_status qattn_tune_decode_options_init(qattn_tune_decode_options* options, size_t struct_size) {
  return guarded([&] { init_versioned(options, struct_size, default_tune_options(), kTuneFirstSize, "options"); });
}

qattn_status qattn_tune_decode(qattn_runtime* runtime, const char* spec, const qattn_tune_decode_options* options,
                               char* json_out, size_t json_len, size_t* json_size_out) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    const qattn::Spec s = spec_of(spec, "spec");
    const qattn::SweepOptions sweep = options ? sweep_options_of(options) : qattn::SweepOptions{};
    const qattn::DecodeTuning t = runtime->rt.tune_decode(s, sweep);
    const std::string json =
        "{\"dataflow\":" + qattn::dump_decision(t.dataflow) + ",\"splits\":" + qattn::dump_decision(t.splits) + "}";
    copy_out(json, json_out, json_len);
    if (json_size_out) *json_size_out = json.size() + 1;
  });
}

qattn_status qattn_decode_tuned(qattn_runtime* runtime, const char* spec, int* tuned_out) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(tuned_out, "tuned_out");
    *tuned_out = runtime->rt.decode_tuned(spec_of(spec, "spec")) ? 1 : 0;
  });
}

qattn_status qattn_unified_max_options_init(qattn_unified_max_options* options, size_t struct_size) {
  return guarded([&] { init_versioned(options, struct_size, default_um_options(), kUmOptionsFirstSize, "options"); });
}

qattn_status qattn_unified_max_window(const char* spec, double* lo_out, double* hi_out, double* limit_lo_out,
                                      double* limit_hi_out) {
  return guarded([&] {
    const qattn::Spec s = spec_of(spec, "spec");
    if (s.phase != qattn::Phase::decode)
      qattn::throw_bad_input(std::string("qattn_unified_max_window takes a decode spec, got '") + spec + "'");
    const qattn::Fmt p = qattn::unified_max_p_type(s);
    const qattn::UnifiedMaxWindow w = qattn::unified_max_window(p), l = qattn::unified_max_limits(p);
    if (lo_out) *lo_out = w.lo;
    if (hi_out) *hi_out = w.hi;
    if (limit_lo_out) *limit_lo_out = l.lo;
    if (limit_hi_out) *limit_hi_out = l.hi;
  });
}

qattn_status qattn_calibrate_unified_max(const double* values, size_t count, const qattn_unified_max_options* options,
                                         qattn_unified_max_calibration* out) {
  return calibrate(values, count, options, out);
}

qattn_status qattn_calibrate_unified_max_f32(const float* values, size_t count, const qattn_unified_max_options* options,
                                             qattn_unified_max_calibration* out) {
  return calibrate(values, count, options, out);
}

}  // extern "C"

// The C API's format calibration (qattn_calibrate_format) over qattn::calibrate.
#include <cstddef>
#include <string>

#include "qattn/calibrate.hpp"
#include "runtime/api/c_api_internal.hpp"

namespace qattn::capi {
namespace {

constexpr size_t kFirstSize = offsetof(qattn_format_calibration_options, inputs) + sizeof(const char*);

qattn_format_calibration_options default_options() {
  const QuantThresholds t;
  qattn_format_calibration_options o{};
  o.struct_size = sizeof o;
  o.min_cosine = t.min_cosine;
  o.max_rel_l1 = t.max_rel_l1;
  return o;
}

CalibrationOptions options_of(const qattn_format_calibration_options* given) {
  const qattn_format_calibration_options o = given ? read_versioned(given, default_options(), kFirstSize, "options")
                                                   : default_options();
  CalibrationOptions c;
  c.thresholds = QuantThresholds{o.min_cosine, o.max_rel_l1};
  validate_thresholds(c.thresholds);
  if (o.candidates_count < 0)
    throw_bad_input("options.candidates_count must be >= 0 (got " + std::to_string(o.candidates_count) + ")");
  if (o.candidates_count > 0 && !o.candidates)
    throw_bad_input("options.candidates is NULL with candidates_count " + std::to_string(o.candidates_count));
  for (int i = 0; i < o.candidates_count; ++i) {
    if (!o.candidates[i]) throw_bad_input("options.candidates[" + std::to_string(i) + "] is NULL");
    c.candidates.push_back(parse_spec(o.candidates[i]));
  }
  c.force = o.force != 0;
  if (o.inputs) c.inputs = o.inputs;
  return c;
}

}  // namespace
}  // namespace qattn::capi

using namespace qattn::capi;

extern "C" {

qattn_status qattn_format_calibration_options_init(qattn_format_calibration_options* options, size_t struct_size) {
  return guarded([&] { init_versioned(options, struct_size, default_options(), kFirstSize, "options"); });
}

qattn_status qattn_calibrate_format(qattn_runtime* runtime, const char* layer_key, const char* reference_spec,
                                    qattn_shape shape, qattn_tensor q, qattn_tensor k, qattn_tensor v,
                                    const qattn_format_calibration_options* options, char* chosen_out,
                                    size_t chosen_len, char* json_out, size_t json_len, size_t* json_size_out) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(layer_key, "layer_key");
    qattn::validate_layer_key(layer_key);
    const qattn::CalibrationOptions o = options_of(options);
    qattn::AttentionCall sample;
    sample.spec = spec_of(reference_spec, "reference_spec");
    sample.problem = problem_of(shape);
    sample.q = view_of(q);
    sample.k = view_of(k);
    sample.v = view_of(v);
    const qattn::QuantDecision d = qattn::calibrate(runtime->rt, layer_key, sample, o);
    copy_out(qattn::to_string(d.chosen), chosen_out, chosen_len);
    const std::string json = qattn::decision_to_json(d);
    copy_out(json, json_out, json_len);
    if (json_size_out) *json_size_out = json.size() + 1;
  });
}

}  // extern "C"

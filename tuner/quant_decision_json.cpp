// JSON form of a quant_format decision (include/qattn/calibrate.hpp). Reading checks every field the
// runtime relies on, so a hand-edited or truncated cache row fails with one line naming the field
// (and calibrate_layer then measures again instead of trusting it).
#include <cmath>
#include <nlohmann/json.hpp>

#include "qattn/calibrate.hpp"
#include "qattn/error.hpp"
#include "cache/json_depth.hpp"

namespace qattn {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "qattn.quant_format";
constexpr int kVersion = 1;

json metric_json(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

[[noreturn]] void fail(const std::string& where, const std::string& message) {
  throw_bad_input("quant_format JSON: " + where + " " + message);
}

const json& member(const json& obj, const std::string& where, const char* key) {
  if (!obj.is_object()) fail(where.empty() ? "top level" : where, "must be an object");
  const auto it = obj.find(key);
  if (it == obj.end()) fail(where.empty() ? key : where + "." + key, "is missing");
  return *it;
}

std::string string_at(const json& obj, const std::string& where, const char* key) {
  const json& v = member(obj, where, key);
  if (!v.is_string()) fail(where.empty() ? key : where + "." + key, "must be a string");
  return v.get<std::string>();
}

Spec spec_at(const json& obj, const std::string& where, const char* key) {
  const std::string text = string_at(obj, where, key);
  try {
    return parse_spec(text);
  } catch (const Error& e) {
    fail(where.empty() ? key : where + "." + key, std::string("is not a spec: ") + e.what());
  }
}

// A metric: a number, or null for "not measured / not finite".
double metric_at(const json& obj, const std::string& where, const char* key) {
  const json& v = member(obj, where, key);
  if (v.is_null()) return kNoMetric;
  if (!v.is_number()) fail(where + "." + key, "must be a number or null");
  return v.get<double>();
}

CandidateVerdict verdict_from(const std::string& text, const std::string& where) {
  for (CandidateVerdict v : {CandidateVerdict::passed, CandidateVerdict::below_threshold, CandidateVerdict::non_finite,
                             CandidateVerdict::unsupported, CandidateVerdict::failed})
    if (text == to_string(v)) return v;
  fail(where, "is '" + text + "'; accepted: passed, below_threshold, non_finite, unsupported, failed");
}

}  // namespace

std::string decision_to_json(const QuantDecision& d) {
  json cands = json::array();
  for (const CandidateResult& c : d.candidates)
    cands.push_back({{"spec", to_string(c.spec)},
                     {"verdict", to_string(c.verdict)},
                     {"cosine", metric_json(c.metrics.cosine)},
                     {"rel_l1", metric_json(c.metrics.rel_l1)},
                     {"rmse", metric_json(c.metrics.rmse)},
                     {"max_abs", metric_json(c.metrics.max_abs)},
                     {"non_finite", c.metrics.non_finite},
                     {"detail", c.detail}});
  const json j = {{"format", kFormat},
                  {"version", kVersion},
                  {"layer", d.layer_key},
                  {"reference", to_string(d.reference)},
                  {"chosen", to_string(d.chosen)},
                  {"fallback", d.fallback},
                  {"reason", d.reason},
                  {"thresholds", {{"min_cosine", d.thresholds.min_cosine}, {"max_rel_l1", d.thresholds.max_rel_l1}}},
                  {"problem", d.problem},
                  {"inputs", d.inputs},
                  {"created_at", d.created_at},
                  {"candidates", cands}};
  return j.dump();
}

QuantDecision decision_from_json(std::string_view text) {
  json j;
  if (cache::json_too_deep(text)) fail("text", "nests arrays/objects deeper than " + std::to_string(cache::kMaxJsonDepth) + " levels");
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    fail("text", std::string("is not JSON (") + e.what() + ")");
  }
  if (string_at(j, "", "format") != kFormat) fail("format", "is not \"" + std::string(kFormat) + "\"");
  const json& version = member(j, "", "version");
  if (!version.is_number_integer() || version.get<long long>() != kVersion)
    fail("version", "is " + version.dump() + "; this qattn reads version " + std::to_string(kVersion));
  QuantDecision d;
  d.layer_key = string_at(j, "", "layer");
  validate_layer_key(d.layer_key);
  d.reference = spec_at(j, "", "reference");
  d.chosen = spec_at(j, "", "chosen");
  const json& fallback = member(j, "", "fallback");
  if (!fallback.is_boolean()) fail("fallback", "must be true or false");
  d.fallback = fallback.get<bool>();
  if (d.fallback && d.chosen != d.reference) fail("chosen", "must equal the reference when fallback is true");
  d.reason = string_at(j, "", "reason");
  const json& t = member(j, "", "thresholds");
  d.thresholds.min_cosine = metric_at(t, "thresholds", "min_cosine");
  d.thresholds.max_rel_l1 = metric_at(t, "thresholds", "max_rel_l1");
  try {
    validate_thresholds(d.thresholds);
  } catch (const Error& e) {
    fail("thresholds", e.what());
  }
  d.problem = string_at(j, "", "problem");
  d.inputs = string_at(j, "", "inputs");
  const json& created = member(j, "", "created_at");
  if (!created.is_number_integer()) fail("created_at", "must be an integer (unix seconds)");
  d.created_at = created.get<long long>();
  const json& cands = member(j, "", "candidates");
  if (!cands.is_array()) fail("candidates", "must be an array");
  bool chosen_listed = false;
  for (size_t i = 0; i < cands.size(); ++i) {
    const std::string where = "candidates[" + std::to_string(i) + "]";
    CandidateResult c;
    c.spec = spec_at(cands[i], where, "spec");
    c.verdict = verdict_from(string_at(cands[i], where, "verdict"), where + ".verdict");
    c.metrics.cosine = metric_at(cands[i], where, "cosine");
    c.metrics.rel_l1 = metric_at(cands[i], where, "rel_l1");
    c.metrics.rmse = metric_at(cands[i], where, "rmse");
    c.metrics.max_abs = metric_at(cands[i], where, "max_abs");
    const json& nf = member(cands[i], where, "non_finite");
    if (!nf.is_number_integer() || nf.get<long long>() < 0) fail(where + ".non_finite", "must be an integer >= 0");
    c.metrics.non_finite = nf.get<long long>();
    c.detail = string_at(cands[i], where, "detail");
    chosen_listed |= c.spec == d.chosen && c.verdict == CandidateVerdict::passed;
    d.candidates.push_back(c);
  }
  if (!d.fallback && !chosen_listed) fail("chosen", "is not a passed candidate of the list");
  return d;
}

}  // namespace qattn

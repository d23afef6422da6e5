// Adaptive quantization: the choice of the cheapest format meeting the thresholds, and its reuse
// through a DecisionStore. No GPU here: measuring goes through FormatEvaluator (runtime/tuning/calibrate.cpp).
#include <cmath>
#include <cstdio>
#include <ctime>

#include "generator/text.hpp"
#include "qattn/calibrate.hpp"
#include "qattn/error.hpp"
#include "qattn/validate.hpp"

namespace qattn {
namespace {

bool is_float(Fmt f) { return f == Fmt::fp16 || f == Fmt::bf16; }

std::string fmt_metric(double x) {
  if (!std::isfinite(x)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

std::string thresholds_text(const QuantThresholds& t) {
  return "cos >= " + fmt_metric(t.min_cosine) + " and relL1 <= " + fmt_metric(t.max_rel_l1);
}

void require_reference(const Spec& reference) {
  if (reference.phase != Phase::prefill || !is_float(reference.qk.fmt))
    throw_bad_input("the calibration reference must be an fp16/bf16 prefill spec; got '" + to_string(reference) + "'");
  require(validate(reference));
}

// The stored decision can stand in for a new measurement only if it answered the same question.
std::string why_stale(const QuantDecision& stored, const Spec& reference, const QuantThresholds& thresholds,
                      const std::vector<Spec>& candidates) {
  if (stored.reference != reference)
    return "the stored decision was for reference '" + to_string(stored.reference) + "'";
  if (stored.thresholds.min_cosine != thresholds.min_cosine || stored.thresholds.max_rel_l1 != thresholds.max_rel_l1)
    return "the stored decision was for thresholds " + thresholds_text(stored.thresholds);
  bool same = stored.candidates.size() == candidates.size();
  for (size_t i = 0; same && i < candidates.size(); ++i) same = stored.candidates[i].spec == candidates[i];
  if (!same) return "the stored decision was for another candidate list";
  return "";
}

}  // namespace

void validate_thresholds(const QuantThresholds& t) {
  if (!(t.min_cosine > 0 && t.min_cosine <= 1))
    throw_bad_input("min cosine " + fmt_metric(t.min_cosine) + " is out of range; accepted: 0 < min cosine <= 1");
  if (!(t.max_rel_l1 >= 0 && std::isfinite(t.max_rel_l1)))
    throw_bad_input("max relative L1 " + fmt_metric(t.max_rel_l1) + " is out of range; accepted: a finite value >= 0");
}

FormatMetrics compare_outputs(const std::vector<double>& ref, const std::vector<double>& got) {
  if (ref.size() != got.size())
    throw_bad_input("compare_outputs: " + std::to_string(ref.size()) + " reference vs " + std::to_string(got.size()) +
                    " candidate elements");
  FormatMetrics m;
  double dot = 0, rr = 0, gg = 0, l1 = 0, ref_l1 = 0, sq = 0, max_abs = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) ++m.non_finite;
    const double e = got[i] - ref[i];
    dot += ref[i] * got[i];
    rr += ref[i] * ref[i];
    gg += got[i] * got[i];
    l1 += std::fabs(e);
    ref_l1 += std::fabs(ref[i]);
    sq += e * e;
    max_abs = std::fmax(max_abs, std::fabs(e));
  }
  if (m.non_finite > 0 || ref.empty()) return m;   // NaN metrics: such a candidate can never pass
  m.cosine = (rr == 0 && gg == 0) ? 1.0 : dot / (std::sqrt(rr) * std::sqrt(gg));
  m.rel_l1 = ref_l1 == 0 ? (l1 == 0 ? 0.0 : INFINITY) : l1 / ref_l1;
  m.rmse = std::sqrt(sq / static_cast<double>(ref.size()));
  m.max_abs = max_abs;
  return m;
}

bool meets(const FormatMetrics& m, const QuantThresholds& t) {
  // Written so that any NaN compares false and fails.
  return m.non_finite == 0 && std::isfinite(m.cosine) && std::isfinite(m.rel_l1) && m.cosine >= t.min_cosine &&
         m.rel_l1 <= t.max_rel_l1;
}

const char* to_string(CandidateVerdict v) {
  switch (v) {
    case CandidateVerdict::passed: return "passed";
    case CandidateVerdict::below_threshold: return "below_threshold";
    case CandidateVerdict::non_finite: return "non_finite";
    case CandidateVerdict::unsupported: return "unsupported";
    case CandidateVerdict::failed: return "failed";
  }
  return "?";
}

Spec parse_spec_family(std::string_view text) {
  const std::vector<std::string> tokens = gen::text::split_ws(text);
  std::string out = "fp16";
  bool has_qk = false, has_pv = false;
  for (const std::string& t : tokens) {
    if (gen::text::starts_with(t, "out=")) out = t.substr(4);
    has_qk |= gen::text::starts_with(t, "qk=");
    has_pv |= gen::text::starts_with(t, "pv=");
    if (gen::text::starts_with(t, "smooth="))
      throw_bad_input("spec family '" + std::string(text) + "': smooth= is chosen by the calibration; leave it out");
  }
  std::string full(text);
  if (!has_qk) full += " qk=" + out;
  if (!has_pv) full += " pv=" + out;
  const Spec s = parse_spec(full);
  if (s.phase != Phase::prefill)
    throw_bad_input("spec family '" + std::string(text) + "': calibration covers prefill specs; accepted: prefill ...");
  if (!is_float(s.qk.fmt) || s.qk.fmt != s.out)
    throw_bad_input("spec family '" + std::string(text) + "' names the fp16/bf16 reference; leave out qk=/pv= or set them to out=" +
                    to_string(s.out));
  require_reference(s);
  return s;
}

namespace {

// The rungs that only a known arch can rank (see default_quant_candidates in calibrate.hpp): 4-bit Q/K
// where INT4 mma is native (sm_80 .. sm_89; on sm_90 INT4 runs as int8 compute and saves nothing), and
// FP8 P·V where it is the fast 8-bit path (sm_89, and sm_90a's wgmma .e4m3). Each unrotated, then with
// rotate=hadamard (more quantizer time, much less Q·K^T error on outlier channels); Q smoothing is
// left out here: it would turn INT4's packed mma into int8 compute.
std::vector<Spec> fast_rungs(const Spec& reference) {
  const Arch a = reference.arch;
  const bool int4_native = int4_mma_by_default(a);
  const bool fp8 = a == Arch::sm_89 || a == Arch::sm_90a;
  const Operand pv = fp8 ? Operand{Fmt::fp8e4m3, Gran::per_channel} : Operand{Fmt::int8, Gran::per_channel};
  std::vector<Spec> out;
  auto add = [&](Fmt qk, Gran g, Rotation r) {
    Spec s = reference;
    s.qk = {qk, g};
    s.pv = pv;
    s.smooth = kSmoothK | kSmoothV;
    s.rotate = r;
    out.push_back(s);
  };
  if (int4_native)
    for (Rotation r : {Rotation::none, Rotation::hadamard}) add(Fmt::int4, Gran::per_thread, r);
  if (fp8)
    for (Rotation r : {Rotation::none, Rotation::hadamard}) add(Fmt::int8, Gran::per_warp, r);
  return out;
}

}  // namespace

std::vector<Spec> default_quant_candidates(const Spec& reference) {
  struct Rung {
    Gran qk;
    int smooth;
    Gran v;
  };
  // Cheapest first: coarser Q/K scale groups, then smoothing passes (V smoothing needs per-channel V).
  static const Rung kLadder[] = {
      {Gran::per_tensor, kSmoothNone, Gran::per_tensor}, {Gran::per_tensor, kSmoothK, Gran::per_tensor},
      {Gran::per_tensor, kSmoothK | kSmoothV, Gran::per_channel},
      {Gran::per_block, kSmoothNone, Gran::per_tensor},  {Gran::per_block, kSmoothK, Gran::per_tensor},
      {Gran::per_block, kSmoothK | kSmoothV, Gran::per_channel},
      {Gran::per_token, kSmoothNone, Gran::per_tensor},  {Gran::per_token, kSmoothK, Gran::per_tensor},
      {Gran::per_token, kSmoothK | kSmoothV, Gran::per_channel},
  };
  std::vector<Spec> out = fast_rungs(reference);
  for (const Rung& r : kLadder) {
    Spec s = reference;
    s.qk = {Fmt::int8, r.qk};
    s.pv = {Fmt::int8, r.v};
    s.smooth = r.smooth;
    out.push_back(s);
  }
  return out;
}

void validate_layer_key(std::string_view key) {
  if (key.empty()) throw_bad_input("the layer key is empty; give a name such as model.layers.7.self_attn");
  if (key.size() > kMaxLayerKeyLength)
    throw_bad_input("the layer key has " + std::to_string(key.size()) + " characters; accepted: at most " +
                    std::to_string(kMaxLayerKeyLength));
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (c < 0x20 || c > 0x7e) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c);
      throw_bad_input("the layer key has a non-printable or non-ASCII byte (" + std::string(hex) + ") at position " +
                      std::to_string(i) + "; accepted: printable ASCII");
    }
  }
  if (key.front() == ' ' || key.back() == ' ')
    throw_bad_input("the layer key '" + std::string(key) + "' starts or ends with a space; accepted: no outer spaces");
}

QuantDecision choose_format(const std::string& layer_key, const Spec& reference, const Problem& problem,
                            const std::vector<Spec>& candidates, const QuantThresholds& thresholds,
                            FormatEvaluator& evaluator) {
  validate_layer_key(layer_key);
  validate_thresholds(thresholds);
  require_reference(reference);
  require(validate(reference, problem));
  QuantDecision d;
  d.layer_key = layer_key;
  d.reference = reference;
  d.thresholds = thresholds;
  d.problem = to_string(problem);
  evaluator.prepare_reference(reference);   // a broken reference ends here, before anything is judged
  const CandidateResult* best = nullptr;   // highest cosine among the measured, for the fallback reason
  for (const Spec& spec : candidates) {
    CandidateResult r;
    r.spec = spec;
    Verdict v = validate(spec);
    if (v) v = validate(spec, problem);
    if (!v) {
      r.detail = v.reason;
      d.candidates.push_back(r);
      continue;
    }
    try {
      r.metrics = evaluator.evaluate(spec, reference);
      const bool finite = r.metrics.non_finite == 0 && std::isfinite(r.metrics.cosine) && std::isfinite(r.metrics.rel_l1);
      r.verdict = meets(r.metrics, thresholds) ? CandidateVerdict::passed
                  : finite                     ? CandidateVerdict::below_threshold
                                               : CandidateVerdict::non_finite;
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::no_gpu) throw;
      r.verdict = CandidateVerdict::failed;
      r.detail = e.what();
    } catch (const std::exception& e) {
      r.verdict = CandidateVerdict::failed;
      r.detail = e.what();
    }
    d.candidates.push_back(r);
  }
  for (const CandidateResult& r : d.candidates) {
    if (r.verdict == CandidateVerdict::passed) {
      d.chosen = r.spec;
      d.reason = "cheapest candidate with " + thresholds_text(thresholds) + ": cos=" + fmt_metric(r.metrics.cosine) +
                 " relL1=" + fmt_metric(r.metrics.rel_l1);
      return d;
    }
    if (r.verdict == CandidateVerdict::below_threshold && (!best || r.metrics.cosine > best->metrics.cosine)) best = &r;
  }
  d.chosen = reference;
  d.fallback = true;
  d.reason = "no candidate met " + thresholds_text(thresholds) + "; ";
  d.reason += best ? "the best was '" + to_string(best->spec) + "' (cos=" + fmt_metric(best->metrics.cosine) +
                         " relL1=" + fmt_metric(best->metrics.rel_l1) + ")"
                   : std::string("none could be measured");
  d.reason += "; falling back to the " + std::string(to_string(reference.out)) + " reference spec";
  return d;
}

QuantDecision calibrate_layer(const std::string& layer_key, const Spec& reference, const Problem& problem,
                              const CalibrationOptions& options, FormatEvaluator& evaluator, DecisionStore* store) {
  validate_layer_key(layer_key);
  validate_thresholds(options.thresholds);
  require_reference(reference);
  const std::vector<Spec> candidates =
      options.candidates.empty() ? default_quant_candidates(reference) : options.candidates;
  std::string note = store ? "measured (nothing stored for this layer)" : "measured (no cache)";
  if (store && options.force) note = "measured (--force)";
  if (store && !options.force) {
    if (std::optional<std::string> json = store->load(layer_key)) {
      try {
        QuantDecision stored = decision_from_json(*json);
        const std::string stale = why_stale(stored, reference, options.thresholds, candidates);
        if (stale.empty() && stored.layer_key == layer_key) {
          stored.from_cache = true;
          stored.cache_note = "reused from the cache (measured on " + stored.problem + ")";
          return stored;
        }
        note = "re-measured: " + (stale.empty() ? "the stored decision names another layer" : stale);
      } catch (const Error& e) {
        note = std::string("re-measured: the stored decision is unreadable (") + e.what() + ")";
      }
    }
  }
  QuantDecision d = choose_format(layer_key, reference, problem, candidates, options.thresholds, evaluator);
  d.inputs = options.inputs;
  d.created_at = static_cast<long long>(std::time(nullptr));
  d.cache_note = note;
  if (store) store->save(layer_key, decision_to_json(d));
  return d;
}

}  // namespace qattn

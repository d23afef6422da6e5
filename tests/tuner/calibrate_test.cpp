// Adaptive quantization on the CPU: the choice of the cheapest passing format through a fake evaluator,
// reuse through a decision store (a map, and the real SQLite cache), the decision JSON, layer keys,
// spec families, and the sample-file parser.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "qattn/calibrate.hpp"
#include "qattn/error.hpp"
#include "qattn/validate.hpp"
#include "runtime/tuning/quant_decision_store.hpp"
#include "tests/cache/cache_test_support.hpp"

namespace qattn {
namespace {

const Spec kReference = parse_spec_family("prefill out=fp16 d=128 causal gqa=4");
const Problem kProblem = parse_problem("b=1,hq=8,hkv=2,q=256,kv=256");

FormatMetrics metrics(double cosine, double rel_l1) {
  FormatMetrics m;
  m.cosine = cosine;
  m.rel_l1 = rel_l1;
  m.rmse = rel_l1 / 10;
  m.max_abs = rel_l1;
  return m;
}

// Metrics per candidate spec text; counts calls. Unlisted candidates throw as a broken kernel would.
class FakeEvaluator : public FormatEvaluator {
 public:
  std::map<std::string, FormatMetrics> by_spec;
  int calls = 0, reference_calls = 0;
  bool reference_fails = false;
  Spec expected_reference = kReference;
  void prepare_reference(const Spec&) override {
    ++reference_calls;
    if (reference_fails) throw Error(ErrorKind::failure, "reference wrote NaN");
  }
  FormatMetrics evaluate(const Spec& candidate, const Spec& reference) override {
    ++calls;
    EXPECT_EQ(reference, expected_reference);
    const auto it = by_spec.find(to_string(candidate));
    if (it == by_spec.end()) throw Error(ErrorKind::failure, "NVRTC: cannot compile " + to_string(candidate));
    return it->second;
  }
};

class MapStore : public DecisionStore {
 public:
  std::map<std::string, std::string> rows;
  std::optional<std::string> load(const std::string& key) override {
    const auto it = rows.find(key);
    return it == rows.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  void save(const std::string& key, const std::string& json) override { rows[key] = json; }
};

std::vector<Spec> ladder() { return default_quant_candidates(kReference); }

// Every candidate gets `m` unless listed in `overrides` (index -> metrics).
FakeEvaluator evaluator_with(FormatMetrics m, const std::map<size_t, FormatMetrics>& overrides = {}) {
  FakeEvaluator e;
  const std::vector<Spec> c = ladder();
  for (size_t i = 0; i < c.size(); ++i) e.by_spec[to_string(c[i])] = overrides.count(i) ? overrides.at(i) : m;
  return e;
}

TEST(CalibrateChoice, LadderIsCheapestFirstAndKeepsTheFamily) {
  const std::vector<Spec> c = ladder();
  ASSERT_EQ(c.size(), 9u);
  EXPECT_EQ(to_string(c.front()), "prefill qk=int8:per_tensor pv=int8:per_tensor out=fp16 d=128 causal gqa=4");
  EXPECT_EQ(to_string(c.back()),
            "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=kv");
  for (const Spec& s : c) {
    EXPECT_TRUE(validate(s)) << to_string(s) << ": " << validate(s).reason;
    EXPECT_EQ(s.head_dim, 128);
    EXPECT_TRUE(s.causal);
    EXPECT_EQ(s.gqa, 4);
  }
  EXPECT_EQ(c[3].qk.gran, Gran::per_block);
  EXPECT_EQ(c[6].qk.gran, Gran::per_token);
}

// With a concrete arch the ladder starts with that arch's fast formats (smooth=kv, each plain then
// rotated) and ends with the arch-free 8-bit ladder above.
TEST(CalibrateChoice, ConcreteArchsPutTheirFastFormatsFirst) {
  const std::vector<Spec> base = ladder();
  auto with_arch = [](Arch a) {
    Spec r = kReference;
    r.arch = a;
    return default_quant_candidates(r);
  };
  auto text = [](const Spec& s) { return to_string(s); };
  const std::vector<Spec> h100 = with_arch(Arch::sm_90a);
  ASSERT_EQ(h100.size(), base.size() + 2);
  EXPECT_EQ(text(h100[0]), "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal gqa=4 smooth=kv arch=sm_90a");
  EXPECT_EQ(text(h100[1]), "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal gqa=4 smooth=kv "
                           "rotate=hadamard arch=sm_90a");
  const std::vector<Spec> ada = with_arch(Arch::sm_89);
  ASSERT_EQ(ada.size(), base.size() + 4);
  EXPECT_EQ(text(ada[0]), "prefill qk=int4:per_thread pv=fp8e4m3:per_channel out=fp16 d=128 causal gqa=4 smooth=kv arch=sm_89");
  EXPECT_EQ(ada[1].rotate, Rotation::hadamard);
  EXPECT_EQ(ada[2].qk.fmt, Fmt::int8);
  const std::vector<Spec> ampere = with_arch(Arch::sm_80);
  ASSERT_EQ(ampere.size(), base.size() + 2);
  EXPECT_EQ(text(ampere[0]), "prefill qk=int4:per_thread pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=kv arch=sm_80");
  EXPECT_EQ(with_arch(Arch::sm_90).size(), base.size());   // INT4 is int8 compute there, no FP8 mma form
  for (Arch a : {Arch::sm_80, Arch::sm_86, Arch::sm_89, Arch::sm_90, Arch::sm_90a}) {
    const std::vector<Spec> c = with_arch(a);
    for (const Spec& s : c) EXPECT_TRUE(validate(s)) << to_string(s) << ": " << validate(s).reason;
    for (size_t i = 0; i < base.size(); ++i) {
      Spec tail = c[c.size() - base.size() + i];
      tail.arch = Arch::unset;
      EXPECT_EQ(tail, base[i]) << "the arch-free ladder closes every list";
    }
  }
}

TEST(CalibrateChoice, PicksTheCheapestPassingCandidate) {
  // Candidates 0..2 fail (low cosine / high L1), 3 and later pass: 3 wins although 8 is more accurate.
  FakeEvaluator e = evaluator_with(metrics(0.9999, 0.01), {{0, metrics(0.95, 0.2)}, {1, metrics(0.9995, 0.08)},
                                                            {2, metrics(0.998, 0.03)}, {8, metrics(0.99999, 0.001)}});
  const QuantDecision d = choose_format("layer.0", kReference, kProblem, ladder(), {}, e);
  EXPECT_FALSE(d.fallback);
  EXPECT_EQ(d.chosen, ladder()[3]);
  ASSERT_EQ(d.candidates.size(), 9u);
  EXPECT_EQ(d.candidates[0].verdict, CandidateVerdict::below_threshold);
  EXPECT_EQ(d.candidates[1].verdict, CandidateVerdict::below_threshold);
  EXPECT_EQ(d.candidates[3].verdict, CandidateVerdict::passed);
  EXPECT_EQ(e.calls, 9) << "every candidate is measured, so the decision carries the whole ladder's evidence";
  EXPECT_EQ(e.reference_calls, 1);
  EXPECT_NE(d.reason.find("cheapest"), std::string::npos) << d.reason;
}

TEST(CalibrateChoice, ThresholdsAreInclusiveBounds) {
  QuantThresholds t{0.999, 0.05};
  EXPECT_TRUE(meets(metrics(0.999, 0.05), t));
  EXPECT_FALSE(meets(metrics(std::nextafter(0.999, 0.0), 0.05), t));
  EXPECT_FALSE(meets(metrics(0.999, std::nextafter(0.05, 1.0)), t));
  EXPECT_TRUE(meets(metrics(1.0, 0.0), t));
  FakeEvaluator e = evaluator_with(metrics(0.5, 0.9), {{4, metrics(0.999, 0.05)}});
  EXPECT_EQ(choose_format("l", kReference, kProblem, ladder(), t, e).chosen, ladder()[4]);
}

TEST(CalibrateChoice, NanMetricsOrNonFiniteOutputsNeverPass) {
  QuantThresholds t{0.9, 0.5};
  FormatMetrics nan_cos = metrics(NAN, 0.01), nan_l1 = metrics(0.9999, NAN);
  FormatMetrics inf_out = metrics(0.9999, 0.01);
  inf_out.non_finite = 3;
  for (const FormatMetrics& m : {nan_cos, nan_l1, inf_out}) EXPECT_FALSE(meets(m, t));
  FakeEvaluator e = evaluator_with(metrics(0.1, 0.9), {{0, nan_cos}, {1, nan_l1}, {2, inf_out}, {5, metrics(0.95, 0.1)}});
  const QuantDecision d = choose_format("l", kReference, kProblem, ladder(), t, e);
  EXPECT_EQ(d.candidates[0].verdict, CandidateVerdict::non_finite);
  EXPECT_EQ(d.candidates[1].verdict, CandidateVerdict::non_finite);
  EXPECT_EQ(d.candidates[2].verdict, CandidateVerdict::non_finite);
  EXPECT_EQ(d.chosen, ladder()[5]);
}

TEST(CalibrateChoice, NonePassingFallsBackToTheReferenceAndSaysWhy) {
  FakeEvaluator e = evaluator_with(metrics(0.99, 0.1), {{7, metrics(0.997, 0.06)}});
  const QuantDecision d = choose_format("l", kReference, kProblem, ladder(), {}, e);
  EXPECT_TRUE(d.fallback);
  EXPECT_EQ(d.chosen, kReference);
  EXPECT_NE(d.reason.find("no candidate met"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find(to_string(ladder()[7])), std::string::npos) << "names the best candidate: " << d.reason;
  EXPECT_NE(d.reason.find("fp16 reference"), std::string::npos) << d.reason;
}

TEST(CalibrateChoice, FailingAndUnsupportedCandidatesAreRecordedAndSkipped) {
  // A row validate() refuses (FP8 Q/K runs quantized P·V only): reported unsupported, never evaluated.
  Spec fp8_qk = kReference;
  fp8_qk.qk = {Fmt::fp8e4m3, Gran::per_thread};
  fp8_qk.pv = {Fmt::fp16, Gran::none};
  std::vector<Spec> list = {fp8_qk, ladder()[0], ladder()[1]};
  FakeEvaluator e;
  e.by_spec[to_string(ladder()[1])] = metrics(0.9999, 0.01);   // ladder()[0] is unknown: throws
  const QuantDecision d = choose_format("l", kReference, kProblem, list, {}, e);
  EXPECT_EQ(d.candidates[0].verdict, CandidateVerdict::unsupported);
  EXPECT_FALSE(d.candidates[0].detail.empty());
  EXPECT_EQ(d.candidates[1].verdict, CandidateVerdict::failed);
  EXPECT_NE(d.candidates[1].detail.find("NVRTC"), std::string::npos);
  EXPECT_EQ(d.chosen, ladder()[1]);
  EXPECT_EQ(e.calls, 2);
}

TEST(CalibrateChoice, BrokenReferenceOrNoGpuEndsTheCalibration) {
  FakeEvaluator e = evaluator_with(metrics(1, 0));
  e.reference_fails = true;
  MapStore store;
  EXPECT_THROW(calibrate_layer("l", kReference, kProblem, {}, e, &store), Error);
  EXPECT_TRUE(store.rows.empty()) << "nothing is stored when the reference could not be measured";
  struct NoGpu : FormatEvaluator {
    FormatMetrics evaluate(const Spec&, const Spec&) override { throw Error(ErrorKind::no_gpu, "no device"); }
  } no_gpu;
  try {
    choose_format("l", kReference, kProblem, ladder(), {}, no_gpu);
    FAIL() << "no_gpu must propagate";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::no_gpu);
  }
}

TEST(CalibrateChoice, RejectsBadThresholdsReferenceAndProblem) {
  FakeEvaluator e = evaluator_with(metrics(1, 0));
  for (QuantThresholds t : {QuantThresholds{0, 0.05}, QuantThresholds{1.01, 0.05}, QuantThresholds{NAN, 0.05},
                            QuantThresholds{0.99, -0.1}, QuantThresholds{0.99, INFINITY}, QuantThresholds{0.99, NAN}})
    EXPECT_THROW(choose_format("l", kReference, kProblem, ladder(), t, e), Error);
  EXPECT_THROW(choose_format("l", ladder()[0], kProblem, ladder(), {}, e), Error) << "the reference must be fp16/bf16";
  EXPECT_THROW(choose_format("l", kReference, parse_problem("b=1,hq=8,hkv=8,q=64,kv=64"), ladder(), {}, e), Error)
      << "hq must be gqa * hkv";
  EXPECT_EQ(e.calls, 0);
}

TEST(CalibrateReuse, StoredDecisionIsReusedWithoutMeasuring) {
  MapStore store;
  FakeEvaluator e = evaluator_with(metrics(0.9999, 0.01));
  const QuantDecision first = calibrate_layer("model.layers.3", kReference, kProblem, {}, e, &store);
  EXPECT_FALSE(first.from_cache);
  EXPECT_EQ(e.calls, 9);
  ASSERT_EQ(store.rows.count("model.layers.3"), 1u);
  const QuantDecision again = calibrate_layer("model.layers.3", kReference, kProblem, {}, e, &store);
  EXPECT_TRUE(again.from_cache);
  EXPECT_EQ(e.calls, 9) << "no measurement on reuse";
  EXPECT_EQ(again.chosen, first.chosen);
  CalibrationOptions force;
  force.force = true;
  EXPECT_FALSE(calibrate_layer("model.layers.3", kReference, kProblem, force, e, &store).from_cache);
  EXPECT_EQ(e.calls, 18);
}

TEST(CalibrateReuse, StaleOrUnreadableDecisionsAreMeasuredAgain) {
  MapStore store;
  FakeEvaluator e = evaluator_with(metrics(0.9999, 0.01));
  calibrate_layer("l", kReference, kProblem, {}, e, &store);
  CalibrationOptions stricter;
  stricter.thresholds.min_cosine = 0.9995;
  QuantDecision d = calibrate_layer("l", kReference, kProblem, stricter, e, &store);
  EXPECT_FALSE(d.from_cache);
  EXPECT_NE(d.cache_note.find("thresholds"), std::string::npos) << d.cache_note;
  Spec other = kReference;
  other.causal = false;
  FakeEvaluator e2;
  e2.expected_reference = other;
  for (const Spec& s : default_quant_candidates(other)) e2.by_spec[to_string(s)] = metrics(1, 0);
  d = calibrate_layer("l", other, kProblem, stricter, e2, &store);
  EXPECT_NE(d.cache_note.find("reference"), std::string::npos) << d.cache_note;
  store.rows["l"] = "{\"format\": \"qattn.quant_format\", \"version\": 1}";
  d = calibrate_layer("l", other, kProblem, stricter, e2, &store);
  EXPECT_FALSE(d.from_cache);
  EXPECT_NE(d.cache_note.find("unreadable"), std::string::npos) << d.cache_note;
  EXPECT_NO_THROW(decision_from_json(store.rows["l"])) << "the bad row was replaced";
}

TEST(CalibrateReuse, SqliteCacheKeepsOneDecisionPerLayerDeviceAndToolchain) {
  cache::testing::TempDir dir;
  cache::LayeredStore store(std::make_unique<cache::Store>(dir.file("q.db")), nullptr);
  const cache::DeviceKey h100{"NVIDIA H100", 9, 0, 132, 13000}, other{"NVIDIA L40S", 8, 9, 142, 13000};
  rt::CacheDecisionStore here(store, h100, "tc1"), there(store, other, "tc1"), newer(store, h100, "tc2");
  FakeEvaluator e = evaluator_with(metrics(0.9999, 0.01));
  calibrate_layer("layers.0", kReference, kProblem, {}, e, &here);
  EXPECT_TRUE(calibrate_layer("layers.0", kReference, kProblem, {}, e, &here).from_cache);
  EXPECT_EQ(e.calls, 9);
  EXPECT_FALSE(calibrate_layer("layers.0", kReference, kProblem, {}, e, &there).from_cache) << "another GPU measures";
  EXPECT_FALSE(calibrate_layer("layers.0", kReference, kProblem, {}, e, &newer).from_cache) << "another toolchain";
  const std::vector<cache::DecisionRecord> rows = store.list_decisions(rt::kQuantFormatKind);
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& r : rows) EXPECT_EQ(r.key, "layers.0");
  EXPECT_EQ(decision_from_json(rows[0].json).layer_key, "layers.0");
}

TEST(CalibrateJson, RoundTripKeepsEveryField) {
  FakeEvaluator e = evaluator_with(metrics(0.9999, 0.01), {{0, metrics(0.9, 0.3)}, {1, metrics(NAN, NAN)}});
  e.by_spec.erase(to_string(ladder()[2]));   // a failed candidate with a detail
  QuantDecision d = choose_format("blocks.11.attn1", kReference, kProblem, ladder(), {0.9991, 0.04}, e);
  d.inputs = "sample.bin";
  d.created_at = 1700000000;
  const QuantDecision r = decision_from_json(decision_to_json(d));
  EXPECT_EQ(r.layer_key, d.layer_key);
  EXPECT_EQ(r.reference, d.reference);
  EXPECT_EQ(r.chosen, d.chosen);
  EXPECT_EQ(r.fallback, d.fallback);
  EXPECT_EQ(r.reason, d.reason);
  EXPECT_EQ(r.thresholds.min_cosine, 0.9991);
  EXPECT_EQ(r.thresholds.max_rel_l1, 0.04);
  EXPECT_EQ(r.problem, d.problem);
  EXPECT_EQ(r.inputs, "sample.bin");
  EXPECT_EQ(r.created_at, 1700000000);
  ASSERT_EQ(r.candidates.size(), d.candidates.size());
  for (size_t i = 0; i < d.candidates.size(); ++i) {
    EXPECT_EQ(r.candidates[i].spec, d.candidates[i].spec);
    EXPECT_EQ(r.candidates[i].verdict, d.candidates[i].verdict);
    EXPECT_EQ(r.candidates[i].detail, d.candidates[i].detail);
    const FormatMetrics &a = r.candidates[i].metrics, &b = d.candidates[i].metrics;
    EXPECT_TRUE(a.cosine == b.cosine || (std::isnan(a.cosine) && std::isnan(b.cosine)));
    EXPECT_TRUE(a.rel_l1 == b.rel_l1 || (std::isnan(a.rel_l1) && std::isnan(b.rel_l1)));
  }
  EXPECT_EQ(r.candidates[1].verdict, CandidateVerdict::non_finite);
  EXPECT_EQ(r.candidates[2].verdict, CandidateVerdict::failed);
  EXPECT_EQ(nlohmann::json::parse(decision_to_json(d))["version"], 1);
  // A fallback decision round-trips too.
  FakeEvaluator bad = evaluator_with(metrics(0.5, 0.5));
  const QuantDecision f = choose_format("l", kReference, kProblem, ladder(), {}, bad);
  EXPECT_TRUE(decision_from_json(decision_to_json(f)).fallback);
}

TEST(CalibrateJson, MalformedInputNamesTheField) {
  FakeEvaluator e = evaluator_with(metrics(0.9999, 0.01));
  const nlohmann::json good = nlohmann::json::parse(decision_to_json(choose_format("l", kReference, kProblem, ladder(), {}, e)));
  auto expect_error = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& needle) {
    nlohmann::json j = good;
    edit(j);
    try {
      decision_from_json(j.dump());
      ADD_FAILURE() << "accepted: " << j.dump().substr(0, 200);
    } catch (const Error& err) {
      EXPECT_EQ(err.kind(), ErrorKind::bad_input);
      EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    }
  };
  expect_error([](auto& j) { j["version"] = 2; }, "version");
  expect_error([](auto& j) { j["format"] = "qattn.decode_splits"; }, "format");
  expect_error([](auto& j) { j.erase("chosen"); }, "chosen");
  expect_error([](auto& j) { j["chosen"] = "prefill qk=int9"; }, "chosen");
  expect_error([](auto& j) { j["layer"] = ""; }, "layer key");
  expect_error([](auto& j) { j["thresholds"]["min_cosine"] = 2.0; }, "thresholds");
  expect_error([](auto& j) { j["candidates"][0]["verdict"] = "great"; }, "candidates[0].verdict");
  expect_error([](auto& j) { j["candidates"][1]["cosine"] = "high"; }, "candidates[1].cosine");
  expect_error([](auto& j) { j["candidates"][0]["non_finite"] = -1; }, "non_finite");
  expect_error([](auto& j) { j["fallback"] = true; }, "chosen");   // fallback must choose the reference
  expect_error([](auto& j) { j["candidates"] = nlohmann::json::array(); }, "chosen");   // chosen not among passed
  EXPECT_THROW(decision_from_json("{not json"), Error);
  EXPECT_THROW(decision_from_json("[]"), Error);
  EXPECT_THROW(decision_from_json(""), Error);
}

TEST(CalibrateKey, LayerKeysMustBePrintableAndShort) {
  EXPECT_NO_THROW(validate_layer_key("model.layers.0.self_attn"));
  EXPECT_NO_THROW(validate_layer_key("unet/down 1/attn2 t=0..10"));
  EXPECT_NO_THROW(validate_layer_key(std::string(kMaxLayerKeyLength, 'a')));
  EXPECT_THROW(validate_layer_key(std::string(kMaxLayerKeyLength + 1, 'a')), Error);
  EXPECT_THROW(validate_layer_key(""), Error);
  EXPECT_THROW(validate_layer_key("layer\n0"), Error);
  EXPECT_THROW(validate_layer_key("layer\t0"), Error);
  EXPECT_THROW(validate_layer_key("caf\xc3\xa9"), Error);
  EXPECT_THROW(validate_layer_key(std::string("a\0b", 3)), Error);
  EXPECT_THROW(validate_layer_key(" layer"), Error);
  EXPECT_THROW(validate_layer_key("layer "), Error);
  FakeEvaluator e = evaluator_with(metrics(1, 0));
  MapStore store;
  EXPECT_THROW(calibrate_layer("bad\x01", kReference, kProblem, {}, e, &store), Error);
  EXPECT_EQ(e.calls, 0);
}

TEST(CalibrateFamily, FamilyTextsNameTheFloatReference) {
  EXPECT_EQ(to_string(parse_spec_family("prefill out=bf16 d=64")), "prefill qk=bf16 pv=bf16 out=bf16 d=64");
  EXPECT_THROW(parse_spec_family("prefill d=128"), Error) << "out= names the element type of the data: required";
  EXPECT_EQ(parse_spec_family("prefill qk=fp16 pv=fp16 out=fp16 d=128"), parse_spec_family("prefill out=fp16 d=128"));
  for (const char* bad : {"decode out=fp16 d=128", "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128",
                          "prefill out=fp16 d=128 smooth=k", "prefill out=fp16 d=100", "prefill out=int8 d=128",
                          "prefill out=fp16 d=128 gqa=0", ""})
    EXPECT_THROW(parse_spec_family(bad), Error) << bad;
}

// ---- sample files ----------------------------------------------------------------------------------------

SampleFile small_header() {
  SampleFile f;
  f.dtype = Fmt::bf16;
  f.bhsd = true;
  f.problem = parse_problem("b=2,hq=4,hkv=2,q=3,kv=5");
  f.head_dim = 8;
  return f;
}

std::vector<unsigned char> small_file() {
  const SampleFile f = small_header();
  std::vector<std::uint16_t> q(2 * 4 * 3 * 8), k(2 * 2 * 5 * 8), v(k.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<std::uint16_t>(i);
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<std::uint16_t>(1000 + i), v[i] = static_cast<std::uint16_t>(0xabcd);
  return encode_sample_file(f, q, k, v);
}

TEST(SampleFileTest, ParsesTheHeaderAndLocatesTheTensors) {
  const std::vector<unsigned char> bytes = small_file();
  const SampleFile f = parse_sample_file(bytes);
  EXPECT_EQ(f.dtype, Fmt::bf16);
  EXPECT_TRUE(f.bhsd);
  EXPECT_EQ(f.problem, parse_problem("b=2,hq=4,hkv=2,q=3,kv=5"));
  EXPECT_EQ(f.head_dim, 8);
  EXPECT_EQ(f.q_bytes, 2u * 2 * 4 * 3 * 8);
  EXPECT_EQ(f.kv_bytes, 2u * 2 * 2 * 5 * 8);
  EXPECT_EQ(f.v_offset + f.kv_bytes, bytes.size());
  auto u16 = [&](size_t at) { return static_cast<unsigned>(bytes[at] | bytes[at + 1] << 8); };
  EXPECT_EQ(u16(f.q_offset + 2 * 5), 5u) << "little-endian Q element 5";
  EXPECT_EQ(u16(f.k_offset), 1000u);
  EXPECT_EQ(u16(f.v_offset + f.kv_bytes - 2), 0xabcdu);
}

TEST(SampleFileTest, RefusesMalformedFiles) {
  const std::vector<unsigned char> good = small_file();
  auto expect_error = [](std::vector<unsigned char> bytes, const std::string& needle) {
    try {
      parse_sample_file(bytes);
      ADD_FAILURE() << "accepted a file that should fail with '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::bad_input);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line";
    }
  };
  expect_error({}, "magic");
  std::vector<unsigned char> b = good;
  b[0] = 'X';
  expect_error(b, "magic");
  b = good;
  b.pop_back();
  expect_error(b, "bytes");
  b = good;
  b.push_back(0);
  expect_error(b, "bytes");
  b = good;
  b[8] = 0xff, b[9] = 0xff, b[10] = 0xff, b[11] = 0x7f;
  expect_error(b, "header length");
  // Header edits: rebuild the file with a modified JSON header and the original payload.
  auto with_header = [&](const std::string& json_text) {
    const SampleFile f = parse_sample_file(good);
    std::vector<unsigned char> out(good.begin(), good.begin() + 8);
    const uint32_t n = static_cast<uint32_t>(json_text.size());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<unsigned char>(n >> (8 * i)));
    out.insert(out.end(), json_text.begin(), json_text.end());
    out.insert(out.end(), good.begin() + static_cast<long>(f.q_offset), good.end());
    return out;
  };
  const std::string ok = R"({"version":1,"dtype":"bf16","layout":"bhsd","b":2,"hq":4,"hkv":2,"q":3,"kv":5,"d":8})";
  EXPECT_NO_THROW(parse_sample_file(with_header(ok)));
  expect_error(with_header(R"({"version":2,"dtype":"bf16","layout":"bhsd","b":2,"hq":4,"hkv":2,"q":3,"kv":5,"d":8})"), "version");
  expect_error(with_header(R"({"version":1,"dtype":"fp32","layout":"bhsd","b":2,"hq":4,"hkv":2,"q":3,"kv":5,"d":8})"), "dtype");
  expect_error(with_header(R"({"version":1,"dtype":"bf16","layout":"sbhd","b":2,"hq":4,"hkv":2,"q":3,"kv":5,"d":8})"), "layout");
  expect_error(with_header(R"({"version":1,"dtype":"bf16","layout":"bhsd","b":2,"hq":4,"hkv":2,"q":3,"kv":5})"), "\"d\"");
  expect_error(with_header(R"({"version":1,"dtype":"bf16","layout":"bhsd","b":0,"hq":4,"hkv":2,"q":3,"kv":5,"d":8})"), "\"b\"");
  expect_error(with_header(R"({"version":1,"dtype":"bf16","layout":"bhsd","b":2,"hq":4,"hkv":3,"q":3,"kv":5,"d":8})"), "multiple");
  expect_error(with_header(R"({"version":1,"dtype":"bf16","layout":"bhsd","b":2,"hq":4,"hkv":2,"q":3,"kv":6,"d":8})"), "bytes");
  expect_error(with_header(R"({"version":1,"dtype":"bf16","layout":"bhsd","b":"2","hq":4,"hkv":2,"q":3,"kv":5,"d":8})"), "integer");
  expect_error(with_header(R"({"version":1,"dtype":"bf16","layout":"bhsd","b":16777216,"hq":4096,"hkv":1,"q":16777216,"kv":1,"d":1024})"), "64 TiB");
  expect_error(with_header("[1, 2]"), "object");
  expect_error(with_header("{oops"), "not JSON");
}

}  // namespace
}  // namespace qattn

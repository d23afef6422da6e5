// qattn run / qattn tune: need a GPU (exit 3 without one).
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/verbs.hpp"
#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/runtime.hpp"
#include "qattn/validate.hpp"

namespace qattn::cli {
namespace {

// JSON has no NaN: a metric that was not computed is null.
nlohmann::json json_number(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

const char* kShapeHelp = "<shape>, e.g. --shape b=1,hq=32,hkv=8,q=4096,kv=4096";

Option shape_option() {
  return {"shape", "SHAPE", "the problem: b=<batch>,hq=<query heads>,hkv=<kv heads>,q=<query length>[,kv=<kv length>] "
                            "(kv defaults to q), e.g. b=1,hq=32,hkv=8,q=4096,kv=4096"};
}

int run(const Args& args) {
  const Spec spec = parse_spec(args.require("spec", "<spec text>"));
  const Problem problem = parse_problem(args.require("shape", kShapeHelp));
  require(validate(spec));
  require(validate(spec, problem));
  const std::string layout = args.get("layout", "bshd");
  if (layout != "bshd" && layout != "bhsd") throw_bad_input("--layout " + layout + " is unknown; accepted: bshd, bhsd");
  Runtime runtime(runtime_options(args));
  const Spec resolved = runtime.resolve(spec);
  const Kernel& k = runtime.kernel(resolved, problem);
  std::random_device rd;
  const Runtime::Accuracy acc = runtime.check(resolved, problem, (static_cast<unsigned long long>(rd()) << 32) ^ rd(), layout == "bhsd");
  TimingOptions t;
  t.repeats = args.get_int("repeats", 30, 1, 100000);
  const double us = median(runtime.benchmark(resolved, problem, t));
  const double tops = attention_flops(problem, resolved.head_dim, resolved.causal) / (us * 1e-6) / 1e12;
  // The kernel attention() launches (timed and checked above): the tuned tiling's fused-Q / TMA twin, if any.
  const Tiling launched = runtime.launch_form(resolved, k.tiling());
  const std::string note = dispatch_note(resolved, k.tiling());
  if (args.has("json")) {
    nlohmann::json j = {{"kernel", kernel_name(resolved, launched)}, {"tuned_tiling", to_string(k.tiling())},
                        {"spec", to_string(resolved)}, {"shape", to_string(problem)}, {"layout", layout},
                        {"time_us", us}, {"repeats", t.repeats}, {"tops", tops},
                        {"accuracy", {{"cosine", acc.cosine}, {"rel_l2", acc.rel_l2}, {"max_abs", acc.max_abs},
                                      {"non_finite", acc.non_finite}, {"passed", acc.passed}, {"verdict", acc.verdict},
                                      {"format_cosine", json_number(acc.format_cosine)},
                                      {"format_rel_l2", json_number(acc.format_rel_l2)}}}};
    j["note"] = note.empty() ? nlohmann::json(nullptr) : nlohmann::json(note);
    std::printf("%s\n", j.dump(2).c_str());
    return acc.passed ? 0 : 1;
  }
  std::printf("kernel   %s\n", kernel_name(resolved, launched).c_str());
  if (launched != k.tiling()) std::printf("tuned    %s (launched as its twin above)\n", to_string(k.tiling()).c_str());
  std::printf("spec     %s\nshape    %s (%s)\ntime     %.1f us (median of %d)\nthroughput %.1f TOPS\n"
              "accuracy cos=%.6f relL2=%.3e maxabs=%.3e nonfinite=%lld  %s\n",
              to_string(resolved).c_str(), to_string(problem).c_str(), layout.c_str(), us, t.repeats, tops, acc.cosine,
              acc.rel_l2, acc.max_abs, acc.non_finite, acc.passed ? "PASS" : "FAIL");
  std::printf("gate     %s\n", acc.verdict.c_str());
  if (!note.empty()) std::printf("note     %s\n", note.c_str());
  return acc.passed ? 0 : 1;
}

int tune(const Args& args) {
  const Spec spec = parse_spec(args.require("spec", "<spec text>"));
  const Problem problem = parse_problem(args.require("shape", kShapeHelp));
  require(validate(spec));
  require(validate(spec, problem));
  Runtime runtime(runtime_options(args));
  const TuningResult r = runtime.tune(spec, problem);
  const std::string note = dispatch_note(runtime.resolve(spec));
  const double flops = attention_flops(problem, spec.head_dim, spec.causal);
  const std::string stored_in = runtime.cache_path().empty() ? "memory only" : runtime.cache_path();
  if (args.has("json")) {
    nlohmann::json j = {{"spec", to_string(spec)}, {"shape", to_string(problem)}, {"bucket", problem_bucket(problem)},
                        {"winner", r.winner_name}, {"time_us", r.time_us}};
    // null: kept in memory only (--no-cache)
    j["stored_in"] = runtime.cache_path().empty() ? nlohmann::json(nullptr) : nlohmann::json(runtime.cache_path());
    j["candidates"] = nlohmann::json::array();
    for (const CandidateOutcome& c : r.candidates)
      j["candidates"].push_back({{"tiling", to_string(c.tiling)}, {"status", to_string(c.status)},
                                 {"median_us", c.median_us},
                                 {"tops", c.median_us > 0 ? flops / (c.median_us * 1e-6) / 1e12 : 0.0},
                                 {"detail", c.detail}});
    j["note"] = note.empty() ? nlohmann::json(nullptr) : nlohmann::json(note);
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  if (!note.empty()) std::printf("note: %s\n", note.c_str());
  std::printf("%-16s %-15s %10s %8s  %s\n", "tiling", "status", "us", "TOPS", "detail");
  for (const CandidateOutcome& c : r.candidates)
    std::printf("%-16s %-15s %10.1f %8.1f  %s\n", to_string(c.tiling).c_str(), to_string(c.status), c.median_us,
                c.median_us > 0 ? flops / (c.median_us * 1e-6) / 1e12 : 0.0, c.detail.substr(0, 120).c_str());
  std::printf("winner %s  %.1f us  (bucket %s, stored in %s)\n", r.winner_name.c_str(), r.time_us,
              problem_bucket(problem).c_str(), stored_in.c_str());
  return 0;
}

}  // namespace

const Verb& run_verb() {
  static const Verb verb{
      "run",
      "launch one spec on random data: time, throughput and accuracy against the reference (GPU)",
      {"run --spec S --shape SHAPE [--layout bshd|bhsd] [--repeats N] [--device N] [--db FILE | --no-cache] [--no-tune] "
       "[--json]"},
      "Resolves the spec for this GPU, picks its kernel (the tuned winner from the cache, tuning first if there is "
      "none unless --no-tune), checks it once against the float64 reference on random data and times it. Prints "
      "the kernel launched, the median time, TOPS and the accuracy with PASS or FAIL; exit 1 on FAIL. Needs a "
      "GPU (exit 3 without one, after the arguments are checked).",
      {{"spec", "S", "the spec text, e.g. 'prefill qk=int8:per_warp pv=fp16 out=fp16 d=128 causal gqa=4'"},
       shape_option(),
       {"layout", "L", "memory layout of Q, K, V and O: bshd (batch, sequence, head, dim; default) or bhsd"},
       {"repeats", "N", "timed launches, 1..100000 (default 30); the median is reported"},
       device_option(),
       db_option(),
       no_cache_option(),
       no_tune_option(),
       json_option("the result")},
      {{"qattn run --spec 'prefill qk=int8:per_warp pv=fp16 out=fp16 d=128 causal gqa=4' --shape b=1,hq=32,hkv=8,q=4096",
        "time and check an INT8 causal prefill on a 4k prompt"},
       {"qattn run --spec 'decode qk=int8:per_token pv=int8:per_token out=bf16 d=128 gqa=4' "
        "--shape b=8,hq=32,hkv=8,q=1,kv=8192 --json",
        "a decode step over an 8k INT8 KV cache, as JSON"}},
      0,
      {},
      run};
  return verb;
}

const Verb& tune_verb() {
  static const Verb verb{
      "tune",
      "measure every candidate tiling of one spec and shape and store the winner (GPU)",
      {"tune --spec S --shape SHAPE [--device N] [--db FILE | --no-cache] [--json]"},
      "Compiles, checks and times every candidate tiling of the spec on this GPU for the shape's size bucket, "
      "and stores the fastest correct one in the cache, where attention calls and `qattn run` find it. Prints one "
      "row per candidate (tiling, status, time, TOPS) and the winner. Needs a GPU (exit 3 without one).",
      {{"spec", "S", "the spec text, e.g. 'prefill qk=fp16 pv=fp16 out=fp16 d=128 causal'"},
       shape_option(),
       device_option(),
       db_option(),
       no_cache_option(),
       json_option("the candidates and the winner")},
      {{"qattn tune --spec 'prefill qk=fp16 pv=fp16 out=fp16 d=128 causal' --shape b=1,hq=32,hkv=32,q=8192",
        "tune a causal fp16 prefill for 8k prompts and store the winner in the default cache"}},
      0,
      {},
      tune};
  return verb;
}

}  // namespace qattn::cli

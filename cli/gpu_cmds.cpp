// qattn run / qattn tune: need a GPU (exit 3 without one).
#include <cstdio>
#include <random>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/runtime.hpp"
#include "qattn/validate.hpp"

namespace qattn::cli {
namespace {

const char* kShapeHelp = "<shape>, e.g. --shape b=1,hq=32,hkv=8,q=4096,kv=4096";

}  // namespace

int run(int argc, char** argv) {
  const Args args(argc, argv, 2, {"spec", "shape", "layout", "repeats", "db", "device"}, {"no-tune", "no-cache"});
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
  std::printf("kernel   %s\n", kernel_name(resolved, launched).c_str());
  if (launched != k.tiling()) std::printf("tuned    %s (launched as its twin above)\n", to_string(k.tiling()).c_str());
  std::printf("spec     %s\nshape    %s (%s)\ntime     %.1f us (median of %d)\nthroughput %.1f TOPS\n"
              "accuracy cos=%.6f relL2=%.3e maxabs=%.3e nonfinite=%lld  %s\n",
              to_string(resolved).c_str(), to_string(problem).c_str(), layout.c_str(), us, t.repeats, tops, acc.cosine,
              acc.rel_l2, acc.max_abs, acc.non_finite, acc.passed ? "PASS" : "FAIL");
  if (const std::string note = dispatch_note(resolved, k.tiling()); !note.empty()) std::printf("note     %s\n", note.c_str());
  return acc.passed ? 0 : 1;
}

int tune(int argc, char** argv) {
  const Args args(argc, argv, 2, {"spec", "shape", "db", "device"}, {"no-cache"});
  const Spec spec = parse_spec(args.require("spec", "<spec text>"));
  const Problem problem = parse_problem(args.require("shape", kShapeHelp));
  require(validate(spec));
  require(validate(spec, problem));
  Runtime runtime(runtime_options(args));
  const TuningResult r = runtime.tune(spec, problem);
  if (const std::string note = dispatch_note(runtime.resolve(spec)); !note.empty()) std::printf("note: %s\n", note.c_str());
  const double flops = attention_flops(problem, spec.head_dim, spec.causal);
  std::printf("%-16s %-15s %10s %8s  %s\n", "tiling", "status", "us", "TOPS", "detail");
  for (const CandidateOutcome& c : r.candidates)
    std::printf("%-16s %-15s %10.1f %8.1f  %s\n", to_string(c.tiling).c_str(), to_string(c.status), c.median_us,
                c.median_us > 0 ? flops / (c.median_us * 1e-6) / 1e12 : 0.0, c.detail.substr(0, 120).c_str());
  std::printf("winner %s  %.1f us  (bucket %s, stored in %s)\n", r.winner_name.c_str(), r.time_us,
              problem_bucket(problem).c_str(), runtime.cache_path().empty() ? "memory only" : runtime.cache_path().c_str());
  return 0;
}

}  // namespace qattn::cli

// qattn calibrate: pick the cheapest quantized format of a layer that stays within thresholds of the
// fp16/bf16 kernel, on sample data (a sample file or random data with outliers), and keep the decision
// in the cache under the layer key. Every argument is checked before the GPU is touched, so bad input
// exits 2 with one line even on a machine without a GPU.
#include <climits>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>

#include "cache/safe_file.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/verbs.hpp"
#include "qattn/calibrate.hpp"
#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "qattn/validate.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/tuning/host_data.hpp"

namespace qattn::cli {
namespace {

double get_double(const Args& args, const std::string& key, double fallback) {
  if (!args.has(key)) return fallback;
  const std::string text = args.get(key);
  size_t used = 0;
  double v = NAN;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(v)) throw_bad_input("--" + key + " " + text + " is not a number");
  return v;
}

std::vector<unsigned char> read_file(const std::string& path) {
  std::string bytes;
  try {
    bytes = cache::read_input_file(path, "--inputs", 1ull << 34);   // regular files only (no FIFO, no /dev/zero)
  } catch (const std::exception& e) {
    throw_bad_input(e.what());
  }
  return std::vector<unsigned char>(bytes.begin(), bytes.end());
}

// Random Q, K, V with the outliers real activations show (runtime/tuning/host_data.cpp): 4 Q channels x10,
// 6 K channels offset by +-U(5, 20), 2 V channels offset likewise; rounded to the element type.
std::vector<std::uint16_t> random_tensor(std::mt19937_64& rng, Fmt fmt, const Problem& p, int heads, int seq, int d,
                                         int biased, int scaled) {
  const std::vector<float> x = rt::random_activations(rng, 1LL * p.batch * seq * heads, d, biased, scaled);
  std::vector<std::uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = rt::to_bits(fmt, x[i]);
  return bits;   // read as [b, s, h, d]: the channel outliers are the same for every row either way
}

void print_decision(const QuantDecision& d) {
  std::printf("layer     %s\nreference %s\nsample    %s (%s)\nthresholds cos >= %g, relL1 <= %g\n\n", d.layer_key.c_str(),
              to_string(d.reference).c_str(), d.problem.c_str(), d.inputs.c_str(), d.thresholds.min_cosine,
              d.thresholds.max_rel_l1);
  std::printf("%-3s %-16s %-10s %-8s %-16s %10s %10s %10s  %s\n", "#", "qk", "pv", "smooth", "verdict", "cos", "relL1",
              "rmse", "detail");
  int i = 0;
  for (const CandidateResult& c : d.candidates) {
    const std::string qk = std::string(to_string(c.spec.qk.fmt)) + ":" + to_string(c.spec.qk.gran);
    const std::string pv = std::string(to_string(c.spec.pv.fmt)) + ":" + to_string(c.spec.pv.gran);
    std::printf("%-3d %-16s %-10s %-8s %-16s %10.6f %10.4e %10.4e  %s\n", ++i, qk.c_str(), pv.substr(0, 18).c_str(),
                smooth_to_string(c.spec.smooth).c_str(), to_string(c.verdict), c.metrics.cosine, c.metrics.rel_l1,
                c.metrics.rmse, c.detail.substr(0, 100).c_str());
  }
  std::printf("\nchosen    %s%s\nreason    %s\ncache     %s\n", to_string(d.chosen).c_str(),
              d.fallback ? "  (FALLBACK to the reference)" : "", d.reason.c_str(), d.cache_note.c_str());
}

int calibrate(const Args& args) {
  const Spec reference = parse_spec_family(
      args.require("spec-family", "<prefill spec without qk/pv>, e.g. --spec-family \"prefill out=fp16 d=128 causal gqa=4\""));
  const std::string layer = args.require("layer", "<layer key>, e.g. --layer model.layers.7.self_attn");
  validate_layer_key(layer);
  CalibrationOptions options;
  options.thresholds.min_cosine = get_double(args, "min-cos", options.thresholds.min_cosine);
  options.thresholds.max_rel_l1 = get_double(args, "max-rel-l1", options.thresholds.max_rel_l1);
  validate_thresholds(options.thresholds);
  options.force = args.has("force");
  if (args.has("inputs") && args.has("random-outliers"))
    throw_bad_input("--inputs and --random-outliers exclude each other; give one (default: --random-outliers)");
  if (args.has("inputs") && args.has("seed")) throw_bad_input("--seed applies to --random-outliers only");

  // The sample data, checked against the family before any GPU work.
  Problem problem;
  std::vector<unsigned char> file;
  SampleFile sample;
  unsigned long long seed = 0;
  if (args.has("inputs")) {
    const std::string path = args.get("inputs");
    file = read_file(path);
    sample = parse_sample_file(file);
    if (sample.dtype != reference.out)
      throw_bad_input("--inputs " + path + " holds " + to_string(sample.dtype) + " data; the family's out=" +
                      to_string(reference.out) + " is the element type of Q, K and V");
    if (sample.head_dim != reference.head_dim)
      throw_bad_input("--inputs " + path + " has d=" + std::to_string(sample.head_dim) + "; the family has d=" +
                      std::to_string(reference.head_dim));
    problem = sample.problem;
    if (args.has("shape") && !(parse_problem(args.get("shape")) == problem))
      throw_bad_input("--shape " + args.get("shape") + " differs from the file's " + to_string(problem) + "; leave --shape out");
    options.inputs = path;
  } else {
    problem = parse_problem(args.require("shape", "<shape> for random data, e.g. --shape b=1,hq=32,hkv=8,q=1024,kv=1024"));
    seed = static_cast<unsigned long long>(args.get_int("seed", 1, 0, INT_MAX));
    options.inputs = "random-outliers seed=" + std::to_string(seed);
  }
  require(validate(reference, problem));

  Runtime runtime(runtime_options(args));
  runtime.resolve(reference);   // exit 3 here without a GPU
  const int ordinal = runtime.options().device;
  const int d = reference.head_dim;
  rt::DeviceBuffer q, k, v;
  bool bhsd_layout = false;
  if (!file.empty()) {
    q = rt::DeviceBuffer(sample.q_bytes, ordinal);
    k = rt::DeviceBuffer(sample.kv_bytes, ordinal);
    v = rt::DeviceBuffer(sample.kv_bytes, ordinal);
    q.upload(file.data() + sample.q_offset, sample.q_bytes);
    k.upload(file.data() + sample.k_offset, sample.kv_bytes);
    v.upload(file.data() + sample.v_offset, sample.kv_bytes);
    bhsd_layout = sample.bhsd;
  } else {
    std::mt19937_64 rng(seed);
    const Fmt t = reference.out;
    q = rt::DeviceBuffer::from(random_tensor(rng, t, problem, problem.heads_q, problem.q_len, d, 0, 4), ordinal);
    k = rt::DeviceBuffer::from(random_tensor(rng, t, problem, problem.heads_kv, problem.kv_len, d, 6, 0), ordinal);
    v = rt::DeviceBuffer::from(random_tensor(rng, t, problem, problem.heads_kv, problem.kv_len, d, 2, 0), ordinal);
  }
  auto view = [&](rt::DeviceBuffer& b, int seq, int heads) {
    return bhsd_layout ? bhsd(b.as<void>(), seq, heads, d) : bshd(b.as<void>(), seq, heads, d);
  };
  AttentionCall call;
  call.spec = reference;
  call.problem = problem;
  call.q = view(q, problem.q_len, problem.heads_q);
  call.k = view(k, problem.kv_len, problem.heads_kv);
  call.v = view(v, problem.kv_len, problem.heads_kv);
  const QuantDecision decision = calibrate(runtime, layer, call, options);
  if (args.has("json")) std::printf("%s\n", decision_to_json(decision).c_str());
  else print_decision(decision);
  return 0;
}

}  // namespace

const Verb& calibrate_verb() {
  static const Verb verb{
      "calibrate",
      "choose the cheapest quantized format of one layer that stays accurate on sample data (GPU)",
      {"calibrate --spec-family F --layer KEY --shape SHAPE [--random-outliers] [--seed N] [--min-cos X] [--max-rel-l1 X] "
       "[--force] [--device N] [--db FILE | --no-cache] [--no-tune] [--json]",
       "calibrate --spec-family F --layer KEY --inputs FILE [--min-cos X] [--max-rel-l1 X] [--force] [...] [--json]"},
      "Runs the family's fp16/bf16 kernel and a ladder of quantized candidates (cheapest first: coarser scale "
      "groups, then smoothing; INT4 and FP8 where the GPU runs them fast) on sample data, measures each against the reference kernel, and keeps "
      "the cheapest candidate within the thresholds as the layer's decision in the cache (falling back to the "
      "reference when none passes). A stored decision is reused unless --force. Prints every candidate's verdict "
      "and the choice. Every argument is checked before the GPU is touched; needs a GPU (exit 3 without one).",
      {{"spec-family", "F", "a prefill spec without qk= and pv=, whose out= (fp16 or bf16) is the type of Q, K and V, "
                            "e.g. 'prefill out=fp16 d=128 causal gqa=4'"},
       {"layer", "KEY", "the layer's name, the key of the stored decision, e.g. model.layers.7.self_attn (no spaces)"},
       {"shape", "SHAPE", "problem size of random sample data, e.g. b=1,hq=32,hkv=8,q=1024,kv=1024 (with --inputs: "
                          "optional, must match the file)"},
       {"inputs", "FILE", "sample data file (Q, K, V of one call; format: include/qattn/calibrate.hpp) instead of "
                          "random data"},
       {"random-outliers", "", "random data with the channel outliers real activations have (the default)"},
       {"seed", "N", "seed of the random data, 0..2147483647 (default 1)"},
       {"min-cos", "X", "the least cosine similarity to the reference a candidate may have (default 0.999)"},
       {"max-rel-l1", "X", "the largest relative L1 error a candidate may have (default 0.05)"},
       {"force", "", "calibrate again even if the layer has a stored decision"},
       device_option(),
       db_option(),
       no_cache_option(),
       no_tune_option(),
       json_option("the decision with every candidate's measurements")},
      {{"qattn calibrate --spec-family 'prefill out=fp16 d=128 causal gqa=4' --layer model.layers.0.self_attn "
        "--shape b=1,hq=32,hkv=8,q=1024",
        "choose a format for layer 0 on random data with outliers"},
       {"qattn calibrate --spec-family 'prefill out=bf16 d=128 causal gqa=4' --layer model.layers.7.self_attn "
        "--inputs layer7.bin --min-cos 0.995 --json",
        "choose on captured activations with a looser cosine bound; JSON out"}},
      0,
      {},
      calibrate};
  return verb;
}

}  // namespace qattn::cli

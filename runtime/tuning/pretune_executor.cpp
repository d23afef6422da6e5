// The GPU pretune worker: a Runtime on one device that tunes prefill items and stores their winners.
// It tunes like Runtime::tune, with two differences that matter for a whole grid: the candidates of a
// spec are compiled once, on compile_jobs threads, and the tuner's runner (with its timing inputs) lives
// across consecutive items that time on the same inputs.
#include "runtime/tuning/pretune_executor.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "generator/text.hpp"
#include "qattn/error.hpp"
#include "generator/render.hpp"
#include "generator/search_space.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/tuning/gpu_runner.hpp"
#include "runtime/registry/runtime_impl.hpp"
#include "runtime/jit/toolchain.hpp"

namespace qattn::rt {
namespace {

// A decode item's sweep options from its problems: the KV lengths and (batch x heads_kv) sizes listed
// in the grid, rounded up to the powers of two the decision tables are bucketed by.
SweepOptions decode_sweep_options(const PretuneItem& item) {
  std::set<int> kv;
  std::set<long long> bh;
  SweepOptions o;
  for (const Problem& p : item.sweep.empty() ? std::vector<Problem>{item.problem} : item.sweep) {
    kv.insert(1 << log2_bucket(p.kv_len));
    bh.insert(1LL << log2_bucket(static_cast<long long>(p.batch) * p.heads_kv));
    o.heads_kv = p.heads_kv;
  }
  o.kv_lens.assign(kv.begin(), kv.end());
  o.batch_heads.assign(bh.begin(), bh.end());
  return o;
}

// The built-in decode handler: Runtime::tune_decode over the item's problems (both decisions stored).
ItemResult tune_decode_item(Runtime& runtime, const PretuneItem& item) {
  const DecodeTuning t = runtime.tune_decode(item.spec, decode_sweep_options(item));
  std::string crossings;
  for (const DataflowBucket& b : t.dataflow.buckets) {
    crossings += (crossings.empty() ? "" : " ") + kv_bucket_text(b.kv_len) + ":";
    for (size_t k = 0; k < b.choice.crossings.size(); ++k)
      crossings += (k ? "," : "") + std::to_string(b.choice.crossings[k]);
  }
  return {true, "crossings " + crossings + "; " + std::to_string(t.splits.cells.size()) + " split cells"};
}

// The built-in linear handler: Runtime::tune_linear over the item's token counts (the table stored).
ItemResult tune_linear_item(Runtime& runtime, const PretuneItem& item) {
  LinearSweepOptions o;
  if (!item.rows.empty()) o.rows = item.rows;
  const LinearTable t = runtime.tune_linear(item.spec, o);
  return {true, "M1 " + std::to_string(t.m1()) + ", M2 " + std::to_string(t.m2())};
}

RuntimeOptions runtime_options_for(const GpuPretuneOptions& o) {
  RuntimeOptions r;
  r.cache_path = o.cache_path;
  r.device = o.device;
  r.timing = o.timing;
  return r;
}

}  // namespace

GpuPretuneWorker::GpuPretuneWorker(GpuPretuneOptions options)
    : options_(std::move(options)), runtime_(runtime_options_for(options_)) {
  Runtime::Impl& rt = RuntimeAccess::impl(runtime_);
  // The runtime goes on without a cache it cannot open; pretune would then tune for nothing.
  if (!rt.store || !rt.store->writable()) {
    const std::vector<std::string> why = rt.store ? rt.store->warnings() : std::vector<std::string>{};
    throw Error(ErrorKind::failure, "pretune needs a writable cache to store its results; " +
                                        (rt.store ? rt.store->sources() : std::string("the cache is off")) +
                                        (why.empty() ? std::string() : " (" + why.back() + ")") +
                                        "; pass --db F or set QATTN_CACHE_DIR");
  }
  name_ = rt.device().name;   // Error(no_gpu) when the device is not there
  class_ = rt.device_key().str();
}

GpuPretuneWorker::~GpuPretuneWorker() = default;

std::string GpuPretuneWorker::device_label() { return "gpu" + std::to_string(options_.device); }

std::string GpuPretuneWorker::device_class() { return class_; }

bool GpuPretuneWorker::done(const PretuneItem& item) {
  if (item.kind == Phase::decode)
    return options_.decode_done ? options_.decode_done(runtime_, item) : runtime_.decode_tuned(item.spec);
  if (item.kind == Phase::linear) return runtime_.linear_tuned(item.spec);
  Runtime::Impl& rt = RuntimeAccess::impl(runtime_);
  const Spec spec = rt.resolve(item.spec);
  // The same lookup Runtime::kernel() makes: a usable stored winner there means no tuning at run time.
  std::lock_guard<std::recursive_mutex> lock(rt.mutex);
  return rt.stored_tiling(spec, item.bucket).has_value();
}

ItemResult GpuPretuneWorker::run(const PretuneItem& item) {
  if (item.kind == Phase::decode) {
    return options_.decode_handler ? options_.decode_handler(runtime_, item) : tune_decode_item(runtime_, item);
  }
  if (item.kind == Phase::linear) return tune_linear_item(runtime_, item);
  return tune_prefill(item);
}

void GpuPretuneWorker::compile_candidates(const Spec& spec, const std::vector<Tiling>& candidates) {
  const std::string text = to_string(spec);
  if (std::find(compiled_specs_.begin(), compiled_specs_.end(), text) != compiled_specs_.end()) return;
  std::vector<gen::Source> sources;
  for (const Tiling& t : candidates) sources.push_back(gen::render_kernel(spec, t));
  // The binary provider compiles a batch on as many threads as it has sources: batches of compile_jobs
  // keep several devices' workers from oversubscribing the CPU. A failed compile is not an error here:
  // the tuner meets it again (from its own compile) and records it as that candidate's outcome.
  const size_t batch = options_.compile_jobs > 0 ? static_cast<size_t>(options_.compile_jobs) : sources.size();
  for (size_t i = 0; i < sources.size(); i += batch) {
    const std::vector<gen::Source> part(sources.begin() + static_cast<long>(i),
                                   sources.begin() + static_cast<long>(std::min(i + batch, sources.size())));
    RuntimeAccess::impl(runtime_).binaries->get(part);
  }
  compiled_specs_.push_back(text);
}

ItemResult GpuPretuneWorker::tune_prefill(const PretuneItem& item) {
  Runtime::Impl& rt = RuntimeAccess::impl(runtime_);
  const Spec spec = rt.resolve(item.spec);
  require(validate(spec, item.problem));
  std::lock_guard<std::recursive_mutex> lock(rt.mutex);
  const std::vector<Tiling> candidates = gen::candidate_tilings(spec, rt.limits());
  compile_candidates(spec, candidates);
  const std::string inputs =
      std::string(to_string(spec.out)) + "|" + std::to_string(spec.head_dim) + "|" + to_string(item.problem);
  if (!runner_ || inputs != runner_inputs_) {
    runner_.reset();   // frees the previous inputs on the device before the next set is made
    runner_ = std::make_unique<rt::GpuCandidateRunner>(rt);
    runner_inputs_ = inputs;
  }
  const TuningResult result = qattn::tune(spec, item.problem, candidates, *runner_, rt.options.timing);
  ++rt.counters.tunings;
  rt.cache_launch_form(spec, result.winner);   // the binary an application launches, for the shipped file
  rt.counters.compiles = rt.binaries->compiles();
  rt.counters.binary_db_hits = rt.binaries->cache_hits();

  cache::TunedRecord rec;   // the same row Runtime::tune writes
  rec.spec = to_string(spec);
  rec.bucket = item.bucket;
  rec.device = rt.device_key();
  rec.toolchain = rt::toolchain_fingerprint();
  rec.kernel_name = result.winner_name;
  rec.binary_key = runner_->binary_key(result.winner);
  rec.time_us = result.time_us;
  rec.candidates_json = result.candidates_json();
  // One transaction, committed before the next item starts. false: a faster winner is stored already,
  // or the write was dropped (the cache's warnings say why); only the second is a failure.
  if (!rt.store->put_tuned(rec) &&
      !rt.store->get_tuned(rec.spec, rec.bucket, rec.device, rec.toolchain)) {
    const std::vector<std::string> why = rt.store->warnings();
    return {false, "tuned " + result.winner_name + " but could not store it" + (why.empty() ? "" : ": " + why.back())};
  }

  size_t passed = 0;
  for (const CandidateOutcome& c : result.candidates)
    passed += c.status == CandidateStatus::won || c.status == CandidateStatus::lost;
  char detail[96];
  std::snprintf(detail, sizeof detail, " %.1f us (%zu of %zu candidates passed)", result.time_us, passed,
                result.candidates.size());
  return {true, result.winner_name + detail};
}

std::vector<int> select_devices(const std::string& which) {
  std::string why;
  if (!rt::driver_available(&why)) throw Error(ErrorKind::no_gpu, "pretune needs a GPU: " + why);
  int count = 0;
  try {
    count = rt::device_count();
  } catch (const std::exception& e) {
    throw Error(ErrorKind::no_gpu, std::string("pretune needs a GPU: ") + e.what());
  }
  if (count <= 0) throw Error(ErrorKind::no_gpu, "pretune needs a GPU and the CUDA driver reports none");
  std::vector<int> devices;
  if (which == "all") {
    for (int i = 0; i < count; ++i) devices.push_back(i);
    return devices;
  }
  for (const std::string& word : gen::text::split(which, ",")) {
    long long ordinal = -1;
    if (!gen::text::parse_int(word, ordinal) || ordinal < 0)
      throw_bad_input("--devices " + which + ": '" + word + "' is not a device ordinal; accepted: all or a list like 0,2");
    if (ordinal >= count)
      throw_bad_input("--devices " + which + ": device " + word + " does not exist (" + std::to_string(count) +
                      " visible: 0.." + std::to_string(count - 1) + ")");
    if (std::find(devices.begin(), devices.end(), ordinal) == devices.end()) devices.push_back(static_cast<int>(ordinal));
  }
  return devices;
}

}  // namespace qattn::rt

namespace qattn {

std::unique_ptr<PretuneWorker> make_gpu_pretune_worker(int device, const std::string& cache_path) {
  rt::GpuPretuneOptions o;
  o.device = device;
  o.cache_path = cache_path;
  return std::make_unique<rt::GpuPretuneWorker>(o);
}

}  // namespace qattn

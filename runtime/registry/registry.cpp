// The request flow of Runtime: in-process map -> SQLite tuned winner -> tune or default -> load.
#include <cmath>
#include <cstdlib>

#include "cache/log.hpp"
#include "cache/open_layer.hpp"
#include "env/env.hpp"
#include "qattn/attention/tile_order.h"
#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "generator/search_space.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/tuning/gpu_runner.hpp"
#include "runtime/calls/helper_kernels.hpp"
#include "runtime/registry/runtime_impl.hpp"
#include "runtime/device/tma_maps.hpp"
#include "runtime/jit/toolchain.hpp"

namespace qattn {

std::string rt::LoadedKernel::kernel_name(const Spec& s, const Tiling& t) { return qattn::kernel_name(s, t); }

namespace {

// The launch shape of (spec, tiling) for `problem`, after the check that its grid fits the hardware's.
gen::LaunchShape checked_shape(const Spec& spec, const Tiling& tiling, const Problem& problem, int band_heads, int ctas) {
  const gen::LaunchShape l = gen::attention_launch(spec, tiling, problem, band_heads, ctas);
  if (l.grid[1] > tile_order::kMaxGridYz || l.grid[2] > tile_order::kMaxGridYz || tiling.persistent)
    require(gen::grid_fits(spec, tiling, problem));   // says which size
  return l;
}

}  // namespace

void rt::LoadedKernel::launch(const AttentionParams& params, const Problem& problem, void* stream) const {
  if (tiling_.tma) return launch(tma_params(params), problem, stream);
  const gen::LaunchShape l = checked_shape(spec_, tiling_, problem, params.band_heads, params.ctas);
  fn_.launch(rt::Dim3{l.grid[0], l.grid[1], l.grid[2]}, rt::Dim3{l.block, 1, 1}, l.smem_bytes,
             static_cast<CUstream>(stream), params);
}

TmaAttentionParams rt::LoadedKernel::tma_params(const AttentionParams& params) const {
  rt::ContextGuard guard(fn_.device());   // the driver encodes tensor maps in a current context
  return rt::tma_params(spec_, tiling_, params);
}

void rt::LoadedKernel::launch(const TmaAttentionParams& params, const Problem& problem, void* stream) const {
  const gen::LaunchShape l = checked_shape(spec_, tiling_, problem, params.a.band_heads, params.a.ctas);
  fn_.launch(rt::Dim3{l.grid[0], l.grid[1], l.grid[2]}, rt::Dim3{l.block, 1, 1}, l.smem_bytes,
             static_cast<CUstream>(stream), params);
}

namespace {

// The spec a varlen kernel takes its tiling from: itself for equal lengths.
Spec equal_length_twin(Spec spec) {
  spec.varlen = false;
  return spec;
}

// The user cache over the shipped one. A file qattn cannot use never stops the runtime: the policy of
// cache::open_layers (cache/open_layer.hpp) sets it aside or goes on without it, and says so in
// cache_warnings().
std::unique_ptr<cache::LayeredStore> open_store(const RuntimeOptions& o) {
  if (!o.use_cache) return nullptr;
  std::string shipped = o.shipped_cache_path;
  if (shipped.empty()) shipped = env::shipped_cache();
  std::string user = o.cache_path, note;
  if (user.empty()) {
    try {
      user = cache::default_cache_path();
    } catch (const std::exception& e) {
      note = std::string(e.what()) + "; going on without the user cache";
    }
  }
  cache::StoreOptions so;
  so.read_only = o.read_only;
  std::unique_ptr<cache::LayeredStore> store;
  try {
    // A path the caller named that is not a qattn cache (their notes.json, a FIFO, /dev/full) is a
    // mistake to report, not a file to work around.
    store = cache::open_layers(user, shipped, so, /*refuse_foreign_user_file=*/!o.cache_path.empty());
  } catch (const cache::CacheError& e) {
    if (e.kind() == cache::CacheError::Kind::not_a_cache) throw_bad_input(e.what());
    throw;
  }
  if (!note.empty()) store->warn(note);
  return store;
}

std::optional<Tiling> usable_tiling(const Spec& spec, const std::string& kernel_name, const DeviceLimits& limits) {
  try {
    const ParsedKernelName parsed = parse_kernel_name(kernel_name);
    if (parsed.family == KernelFamily::attention && parsed.spec == spec && validate(spec, parsed.tiling, limits))
      return parsed.tiling;
  } catch (const std::exception&) {
    // A name this qattn cannot parse is as unusable as a tiling that does not fit.
  }
  return std::nullopt;
}

}  // namespace

Runtime::Impl::Impl(RuntimeOptions o) : options(std::move(o)) {
  store = open_store(options);
  binaries = std::make_unique<rt::BinaryProvider>(store.get(), store && store->writable());
}

std::optional<Tiling> Runtime::Impl::stored_tiling(const Spec& spec, const std::string& bucket) {
  const cache::DeviceKey here = device_key();
  const cache::TunedLookup found = store->lookup_tuned(to_string(spec), bucket, here, rt::toolchain_fingerprint());
  const std::string instead = options.tune ? "re-tuning" : "using the default tiling";
  const std::string where = "qattn cache: " + found.source + ": ";
  switch (found.status) {
    case cache::TunedLookup::Status::absent:
      return std::nullopt;   // a first request: nothing to report
    case cache::TunedLookup::Status::hit:
      if (auto tiling = usable_tiling(spec, found.record->kernel_name, limits())) {
        ++counters.tuned_db_hits;
        return tiling;
      }
      store->warn(where + "stored winner " + found.record->kernel_name + " does not fit " + to_string(spec) +
                  " on this device; " + instead);
      return std::nullopt;
    case cache::TunedLookup::Status::other_driver: {
      // Same GPU model, SM count and toolchain: the tiling very likely still wins, but a new driver can
      // change code generation, so it must pass the tuner's verification here before it is trusted.
      const std::optional<Tiling> tiling = usable_tiling(spec, found.record->kernel_name, limits());
      if (!tiling) {
        store->warn(where + found.reason + "; its winner does not fit this device; " + instead);
        return std::nullopt;
      }
      rt::GpuCandidateRunner runner(*this);
      const Verification check = runner.verify(spec, *tiling);
      if (!check.passed) {
        store->warn(where + found.reason + "; its tiling failed verification here (" + check.detail + "); " + instead);
        return std::nullopt;
      }
      cache::TunedRecord revalidated = *found.record;
      revalidated.device = here;
      revalidated.created_at = 0;   // binary_key stays: it covers source and toolchain, not the driver
      store->put_tuned(revalidated);
      store->warn(where + found.reason + "; re-validated its tiling here (" + check.detail + ")" +
                  (store->writable() ? " and stored it under this driver" : ""));
      ++counters.tuned_db_hits;
      return tiling;
    }
    case cache::TunedLookup::Status::other_toolchain:
    case cache::TunedLookup::Status::other_device:
      store->warn(where + found.reason + "; " + instead);
      return std::nullopt;
  }
  return std::nullopt;
}

const rt::DeviceInfo& Runtime::Impl::device() {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (!device_info) {
    std::string why;
    if (!rt::driver_available(&why)) throw Error(ErrorKind::no_gpu, why);
    int n = 0;
    try {
      n = rt::device_count();
    } catch (const std::exception& e) {
      throw Error(ErrorKind::no_gpu, e.what());
    }
    if (options.device < 0 || options.device >= n)
      throw Error(ErrorKind::no_gpu, "CUDA device " + std::to_string(options.device) + " does not exist (" +
                                         std::to_string(n) + " device(s) visible)");
    device_info = rt::query_device(options.device);
  }
  return *device_info;
}

cache::DeviceKey Runtime::Impl::device_key() {
  const rt::DeviceInfo& d = device();
  return cache::DeviceKey{d.name, d.cc_major, d.cc_minor, d.sm_count, d.driver_version};
}

DeviceLimits Runtime::Impl::limits() {
  DeviceLimits l;
  l.max_smem_per_block = device().max_smem_per_block_optin;
  l.smem_per_sm = device().smem_per_sm;
  l.smem_reserved_per_block = device().smem_reserved_per_block;
  l.max_threads_per_sm = device().max_threads_per_sm;
  l.max_threads_per_block = device().max_threads_per_block;
  return l;
}

Arch Runtime::Impl::device_arch() {
  try {
    return parse_arch(rt::arch_for(device()));
  } catch (const std::invalid_argument& e) {
    throw Error(ErrorKind::bad_input, std::string("this GPU is not supported: ") + e.what());
  }
}

Spec Runtime::Impl::resolve(const Spec& spec) {
  require(validate(spec));
  Spec s = spec;
  const Arch native = device_arch();
  if (s.arch == Arch::unset) s.arch = native;
  else if (s.arch != native)
    throw_bad_input(std::string("the spec asks for arch=") + to_string(s.arch) + " but device " +
                    std::to_string(options.device) + " (" + device().name + ") runs " + to_string(native) +
                    "; leave arch unset to use the device's");
  return s;
}

std::shared_ptr<rt::LoadedKernel> Runtime::Impl::load(const Spec& spec, const Tiling& tiling) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  const std::string name = kernel_name(spec, tiling);
  if (auto it = by_name.find(name); it != by_name.end()) return it->second;
  require(validate(spec, tiling, limits()));
  // How the kernel runs when the spec's text does not say it (qk=int4 as int8 compute on sm_90, ...):
  // printed once per process under QATTN_LOG=1, like the cache's warnings.
  if (const std::string note = dispatch_note(spec, tiling); !note.empty()) cache::log_once("qattn: " + name + ": " + note);
  rt::Binary bin = binaries->get({gen::render_kernel(spec, tiling)}).front();
  if (!bin.error.empty()) throw Error(ErrorKind::failure, bin.error);
  counters.compiles = binaries->compiles();
  counters.binary_db_hits = binaries->cache_hits();
  rt::Module module = rt::Module::load(bin.cubin, options.device);
  rt::Kernel fn = module.kernel(name);
  const int smem = kernel_smem_bytes(spec, tiling);
  if (smem > 48 * 1024) fn.set_max_dynamic_smem(smem);
  auto k = std::make_shared<rt::LoadedKernel>(spec, tiling, std::move(module), std::move(fn), static_cast<unsigned>(smem),
                                               bin.spill_bytes);
  ++counters.loads;
  by_name[name] = k;
  return k;
}

std::shared_ptr<rt::Kernel> Runtime::Impl::load_source(const gen::Source& source) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (auto it = sources.find(source.kernel_name); it != sources.end()) return it->second.second;
  rt::Binary bin = binaries->get({source}).front();
  if (!bin.error.empty()) throw Error(ErrorKind::failure, bin.error);
  counters.compiles = binaries->compiles();
  counters.binary_db_hits = binaries->cache_hits();
  rt::Module module = rt::Module::load(bin.cubin, options.device);
  auto fn = std::make_shared<rt::Kernel>(module.kernel(source.kernel_name));
  ++counters.loads;
  sources[source.kernel_name] = {std::move(module), fn};
  return fn;
}

TuningResult Runtime::Impl::tune(const Spec& spec, const Problem& problem) {
  if (spec.varlen) return tune(equal_length_twin(spec), problem);   // its tiling is the twin's (see kernel())
  std::lock_guard<std::recursive_mutex> lock(mutex);
  rt::GpuCandidateRunner runner(*this);
  std::vector<Tiling> candidates;
  for (const Tiling& t : gen::candidate_tilings(spec, limits()))
    if (gen::grid_fits(spec, t, problem)) candidates.push_back(t);
  if (candidates.empty()) require(gen::grid_fits(spec, default_tiling(spec, limits()), problem));   // says why
  TuningResult result = qattn::tune(spec, problem, candidates, runner, options.timing);
  ++counters.tunings;
  counters.compiles = binaries->compiles();
  counters.binary_db_hits = binaries->cache_hits();
  if (store && !options.read_only) {
    cache::TunedRecord rec;
    rec.spec = to_string(spec);
    rec.bucket = problem_bucket(problem);
    rec.device = device_key();
    rec.toolchain = rt::toolchain_fingerprint();
    rec.kernel_name = result.winner_name;
    rec.binary_key = runner.binary_key(result.winner);
    rec.time_us = result.time_us;
    rec.candidates_json = result.candidates_json();
    store->put_tuned(rec);
  }
  cache_launch_form(spec, result.winner);
  return result;
}

void Runtime::Impl::cache_launch_form(const Spec& spec, const Tiling& winner) {
  if (!store || options.read_only) return;   // no file to keep it in: attention() compiles it when it runs
  const Tiling launched = launch_form(spec, winner);
  if (launched == winner) return;
  const rt::Binary bin = binaries->get({gen::render_kernel(spec, launched)}).front();
  if (!bin.error.empty()) cache::log_once("qattn: " + bin.error);
  counters.compiles = binaries->compiles();
  counters.binary_db_hits = binaries->cache_hits();
}

namespace rt {

ExperimentOptions ExperimentOptions::from_environment() {
  ExperimentOptions o;
  o.fuse_q_quant = !env::fuse_q_off();
  o.tma_loads = !env::tma_off();
  o.causal_band_heads = env::causal_band_heads();
  o.concurrent_passes = !env::concurrent_passes_off();
  o.quant_one_pass = env::quant_one_pass();
  o.plan_graphs = !env::plan_graphs_off();
  return o;
}

ExperimentOptions& experiment_options(Runtime& runtime) { return RuntimeAccess::impl(runtime).experiment; }

}  // namespace rt

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Runtime::~Runtime() = default;

Spec Runtime::resolve(const Spec& spec) { return impl_->resolve(spec); }

CompiledKernel Runtime::compile(const Spec& spec, const Tiling& tiling, bool want_ptx) {
  require(validate(spec, tiling, default_limits(spec.arch)));
  const gen::Source src = gen::render_kernel(spec, tiling);
  rt::Binary bin = impl_->binaries->get({src}, want_ptx).front();
  {
    std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
    impl_->counters.compiles = impl_->binaries->compiles();
    impl_->counters.binary_db_hits = impl_->binaries->cache_hits();
  }
  if (!bin.error.empty()) throw Error(ErrorKind::failure, bin.error);
  CompiledKernel k;
  k.kernel_name = src.kernel_name;
  k.spec = spec;
  k.tiling = tiling;
  k.cubin = std::move(bin.cubin);
  k.ptx = std::move(bin.ptx);
  k.source = src.text;
  k.log = std::move(bin.log);
  k.registers = bin.registers;
  k.spill_bytes = bin.spill_bytes;
  k.wgmma_serialized = bin.wgmma_serialized;
  k.smem_bytes = kernel_smem_bytes(spec, tiling);
  k.compile_ms = bin.compile_ms;
  k.from_cache = bin.from_cache;
  return k;
}

std::vector<CompiledKernel> Runtime::compile_helpers(const Spec& spec) {
  require(validate(spec));
  if (spec.arch == Arch::unset) throw_bad_input("compile needs an arch: set arch=<sm_80|sm_86|sm_89|sm_90|sm_90a>");
  const std::vector<gen::Source> sources = rt::helper_sources(spec, impl_->options.k_mean_sample_tokens);
  const std::vector<rt::Binary> bins = impl_->binaries->get(sources);
  std::vector<CompiledKernel> out;
  for (size_t i = 0; i < bins.size(); ++i) {
    if (!bins[i].error.empty()) throw Error(ErrorKind::failure, bins[i].error);
    CompiledKernel k;
    k.kernel_name = sources[i].kernel_name;
    k.spec = spec;
    k.cubin = bins[i].cubin;
    k.source = sources[i].text;
    k.registers = bins[i].registers;
    k.spill_bytes = bins[i].spill_bytes;
    k.wgmma_serialized = bins[i].wgmma_serialized;
    k.compile_ms = bins[i].compile_ms;
    k.from_cache = bins[i].from_cache;
    out.push_back(std::move(k));
  }
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  impl_->counters.compiles = impl_->binaries->compiles();
  impl_->counters.binary_db_hits = impl_->binaries->cache_hits();
  return out;
}

Runtime::Impl::SpecFields Runtime::Impl::spec_fields(const Spec& s) { return gen::schema::spec_key(s); }

Runtime::Impl::RequestKey Runtime::Impl::request_key(const Spec& s, const Problem& problem) {
  RequestKey k;
  k.spec = spec_fields(s);
  const ProblemBucket b = problem_bucket_dims(problem);
  k.q = b.q;
  k.kv = b.kv;
  k.bh = b.bh;
  return k;
}

const Kernel& Runtime::kernel(const Spec& spec_in, const Problem& problem) {
  // A repeated request: the spec as asked was resolved and validated when it was first seen; only the
  // problem is new.
  const Impl::RequestKey asked = Impl::request_key(spec_in, problem);
  {
    std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
    if (auto it = impl_->by_request.find(asked); it != impl_->by_request.end()) {
      require(validate(it->second->spec(), problem));
      ++impl_->counters.memory_hits;
      return *it->second;
    }
  }
  const Spec spec = resolve(spec_in);
  if (spec.phase != Phase::prefill)
    throw_bad_input("kernel(), attention(), check() and benchmark() take prefill specs; run '" + to_string(spec) +
                    "' with Runtime::decode (include/qattn/decode.hpp: the cache layout and split count are part of the call)");
  require(validate(spec, problem));
  const Impl::RequestKey resolved = Impl::request_key(spec, problem);
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  if (auto it = impl_->by_request.find(resolved); it != impl_->by_request.end()) {
    ++impl_->counters.memory_hits;
    impl_->by_request[asked] = it->second;
    return *it->second;
  }
  std::optional<Tiling> tiling;
  // A varlen kernel runs the tiling tuned for its equal-length twin (tuned and stored under the twin's
  // spec): the same tiles, only each CTA's sequence lengths differ. So it is never tuned itself. Untuned
  // (a twin with no stored winner and tuning off), it takes its own default tiling, which avoids the few
  // twin defaults that spill once the lengths take registers (search_space.cpp); so does a twin's tuned
  // tiling whose varlen kernel spills.
  if (spec.varlen) {
    const Spec twin = equal_length_twin(spec);
    if (impl_->options.tune) tiling = kernel(twin, problem).tiling();
    else if (impl_->store) tiling = impl_->stored_tiling(twin, problem_bucket(problem));
    // Where the lengths' registers push the twin's tiling into spills, the varlen default runs instead.
    // Loaded, not just compiled: the launch form is the kernel attention() runs, so the load is reused.
    if (tiling && impl_->load(spec, launch_form(spec, *tiling))->spill_bytes() > 0) tiling.reset();
    if (!tiling) tiling = default_tiling(spec, impl_->limits());
  }
  if (!tiling && impl_->store) tiling = impl_->stored_tiling(spec, problem_bucket(problem));
  if (!tiling) tiling = impl_->options.tune ? impl_->tune(spec, problem).winner : default_tiling(spec, impl_->limits());
  // A bucket's winner may not launch at this problem's size (the causal wgmma grid past 65535 query tiles).
  const Tiling fitting = gen::launchable_tiling(spec, problem, *tiling, impl_->limits());
  if (fitting != *tiling)
    cache::log_once("qattn: " + kernel_name(spec, *tiling) + ": " + gen::grid_fits(spec, *tiling, problem).reason + "; running " +
                    to_string(fitting) + " instead");
  auto k = impl_->load(spec, fitting);
  impl_->by_request[resolved] = k;
  impl_->by_request[asked] = k;
  return *k;
}

TuningResult Runtime::tune(const Spec& spec_in, const Problem& problem) {
  const Spec spec = resolve(spec_in);
  if (spec.phase != Phase::prefill)
    throw_bad_input("tune() takes prefill specs; tune a decode spec's dataflow and split counts with "
                    "Runtime::tune_decode (or qattn pretune); accepted: a prefill spec");
  require(validate(spec, problem));
  TuningResult r = impl_->tune(spec, problem);
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  impl_->by_request[Impl::request_key(spec, problem)] = impl_->load(spec, r.winner);
  return r;
}

RuntimeCounters Runtime::counters() const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  return impl_->counters;
}

const RuntimeOptions& Runtime::options() const { return impl_->options; }

std::string Runtime::cache_path() const { return impl_->store ? impl_->store->path() : std::string(); }

std::string Runtime::cache_status() const { return impl_->store ? impl_->store->status() : std::string(); }

std::vector<std::string> Runtime::cache_warnings() const {
  return impl_->store ? impl_->store->warnings() : std::vector<std::string>();
}

}  // namespace qattn

// Runtime::Impl — shared by the registry (registry.cpp), the tuner's GPU runner (gpu_runner.cpp) and
// the high-level attention call (attention_call.cpp).
#pragma once
#include <array>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <memory>
#include <mutex>
#include <optional>

#include "cache/layered_store.hpp"
#include "generator/spec_schema.hpp"
#include "qattn/inflection.hpp"
#include "qattn/linear_inflection.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/runtime.hpp"
#include "qattn/validate.hpp"
#include "runtime/calls/append_launch.hpp"
#include "runtime/calls/attention_stage.hpp"
#include "runtime/calls/cache_gather.hpp"
#include "runtime/calls/linear_launch.hpp"
#include "runtime/jit/binary_provider.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/module.hpp"
#include "runtime/registry/experiment_options.hpp"

namespace qattn {
namespace rt {

struct DecodeLaunch;

// A kernel loaded on the runtime's device.
class LoadedKernel final : public qattn::Kernel {
 public:
  LoadedKernel(Spec spec, Tiling tiling, rt::Module module, rt::Kernel fn, unsigned smem, int spill_bytes = -1)
      : name_(kernel_name(spec, tiling)), spec_(spec), tiling_(tiling), module_(std::move(module)),
        fn_(std::move(fn)), smem_(smem), spill_bytes_(spill_bytes) {}
  const std::string& name() const override { return name_; }
  const Spec& spec() const override { return spec_; }
  const Tiling& tiling() const override { return tiling_; }
  void launch(const AttentionParams& params, const Problem& problem, void* stream) const override;
  // _tma kernels: `params` with its K and V^T tensor maps encoded (in this kernel's context), and the
  // launch of such a parameter block, so that a prepared call encodes its maps once, not per launch.
  TmaAttentionParams tma_params(const AttentionParams& params) const;
  void launch(const TmaAttentionParams& params, const Problem& problem, void* stream) const;
  const rt::Kernel& function() const { return fn_; }
  int spill_bytes() const { return spill_bytes_; }   // ptxas's report of its binary; -1 unknown

 private:
  static std::string kernel_name(const Spec& s, const Tiling& t);
  std::string name_;
  Spec spec_;
  Tiling tiling_;
  rt::Module module_;
  rt::Kernel fn_;
  unsigned smem_;
  int spill_bytes_;
};

}  // namespace rt

// Runtime::Impl of a Runtime, for the library's parts that are not members (the pretune worker, calibrate()).
struct RuntimeAccess {
  static Runtime::Impl& impl(Runtime& runtime) { return *runtime.impl_; }
};

struct Runtime::Impl {
  explicit Impl(RuntimeOptions o);

  const rt::DeviceInfo& device();   // throws Error(no_gpu) without a driver or device
  cache::DeviceKey device_key();
  DeviceLimits limits();
  Arch device_arch();
  Spec resolve(const Spec& spec);

  // Loads (compiling or taking the cached cubin) the kernel of (spec, tiling); kept for the runtime's life.
  std::shared_ptr<rt::LoadedKernel> load(const Spec& spec, const Tiling& tiling);
  // A loaded quantization pass by its rendered source (see quant_pipeline.cpp).
  std::shared_ptr<rt::Kernel> load_source(const gen::Source& source);
  // A helper kernel by its name parts: rendered (render()) only the first time, so a call that finds it
  // loaded builds no source text.
  template <class Render>
  std::shared_ptr<rt::Kernel> load_helper(const HelperKernel& helper, Render&& render) {
    {
      std::lock_guard<std::recursive_mutex> lock(mutex);
      if (auto it = sources.find(helper_kernel_name(helper)); it != sources.end()) return it->second.second;
    }
    return load_source(render());
  }
  TuningResult tune(const Spec& spec, const Problem& problem);
  // Compiles into the binary cache the form attention() and prepare() launch for a tuned winner (its
  // _qf / _tma twin, Runtime::launch_form), so that a cache pretuned and shipped holds the binaries an
  // application runs, not only the ones the tuner timed. Nothing without a writable cache or when the
  // winner is its own launch form; a twin that does not compile is logged once (attention() reports it).
  void cache_launch_form(const Spec& spec, const Tiling& winner);
  // The stored winner's tiling for (spec, bucket) on this device, if the cache has a usable one: an
  // exact hit, or another driver's entry whose tiling passes verification here (then stored under this
  // driver). Every other outcome but "absent" is recorded as a cache warning.
  std::optional<Tiling> stored_tiling(const Spec& spec, const std::string& bucket);
  // The calls (runtime/calls/), which the public Runtime forwards to and the tuner's GPU side
  // (runtime/tuning/) uses directly: the tuning path never goes back through the public Runtime.
  Tiling launch_form(const Spec& spec, const Tiling& tiling);   // Runtime::launch_form
  // Throws bad_input unless `spec` (resolved) is a prefill spec that `problem` fits.
  static void require_prefill(const Spec& spec, const Problem& problem);
  std::unique_ptr<PreparedAttention> prepare_with(const AttentionCall& call, const Tiling& tiling, void* stream);
  // `lent`: the runtime's per-stream workspace (attention()), or null: the prepared call owns one.
  std::unique_ptr<PreparedAttention> prepare_in(const AttentionCall& call, const Spec& spec, const Tiling& tiling,
                                                void* stream, rt::DeviceBuffer* lent);
  void run(const PreparedAttention& prepared, TensorView o, float softmax_scale, float* lse, void* stream);
  // AttentionParams with the problem's dimensions and the causal band schedule filled in; no pointers.
  AttentionParams shape_params(const Spec& spec, const Tiling& tiling, const Problem& problem);
  // The quantized call's passes, workspace layout and LSE correction (runtime/calls/attention_stage.hpp),
  // decided for (spec resolved, problem, launch tiling); lse_fix: prepare the LSE correction when K is smoothed.
  rt::AttentionStage stage_attention(const Spec& spec, const Problem& problem, const Tiling& tiling, bool lse_fix);
  struct StageInputs {
    std::array<TensorRef, 3> x{};   // q, k, v as the caller holds them
    const int* cu_q = nullptr;
    const int* cu_kv = nullptr;
    Problem problem;
    int head_dim = 0;
  };
  static QuantParams stage_quant_params(const rt::QuantSlot& slot, const TensorRef& x, char* base, int d,
                                        const int* cu_seqlens);
  // "" when the passes can read `in` and write the workspace at `base`, else the reason (one line).
  static std::string stage_input_problem(const rt::AttentionStage& stage, const StageInputs& in, char* base);
  // Side streams and their fork / join events, for a stage that forks (rt::AttentionStage::fork).
  struct PassFork {
    rt::Stream side[2];
    rt::Event forked, joined[2];
    std::mutex mutex;   // one fork at a time records the events
    explicit PassFork(int device)
        : side{rt::Stream(device), rt::Stream(device)},
          forked(device, false),
          joined{rt::Event(device, false), rt::Event(device, false)} {}
  };
  PassFork& stream_fork(void* stream);   // attention()'s and prepare()'s, per caller stream
  // Queues the passes on `stream` (and on pf's side streams when the stage forks), fills ap's q, k, v
  // and their scales and means, and with `fix` the LSE correction's row dots.
  void enqueue_stage(const rt::AttentionStage& stage, const StageInputs& in, char* base, void* stream,
                     AttentionParams& ap, LseCorrectionParams* fix, PassFork* pf);
  // After the attention kernel: adds softmax_scale * q·mean_k to `lse` (fix from enqueue_stage).
  static void add_lse_fix(const rt::AttentionStage& stage, LseCorrectionParams fix, float* lse, float softmax_scale,
                          void* stream);
  void decode(const DecodeCall& call, void* stream);
  void append_kv(const AppendKvCall& call, void* stream);
  // Checks an append call (before any GPU work: no GPU is needed to refuse a malformed one), resolves
  // it and loads its kernels (runtime/calls/append_launch.hpp).
  rt::AppendLaunch make_append_launch(const AppendKvCall& call);
  // Tiling, loaded kernel and split count of one decode kernel launch (decode_call.cpp).
  struct DecodeKernelChoice;
  DecodeKernelChoice choose_decode(const Spec& spec, const Problem& problem, const Tiling& requested, int requested_splits);
  // Refuses (bad_input naming `what`) a decode call that no kernel can run; needs no GPU. pointers: also
  // q, o and kv_lens (a plan's call need not have them).
  static void check_decode_call(const DecodeCall& call, const char* what, bool pointers);
  // Routes a checked decode call and loads its kernels: everything but its pointers and workspace
  // (runtime/calls/decode_launch.hpp).
  rt::DecodeLaunch make_decode_launch(const DecodeCall& call);

  RuntimeOptions options;
  rt::ExperimentOptions experiment = rt::ExperimentOptions::from_environment();
  std::unique_ptr<cache::LayeredStore> store;   // user layer over the shipped one; null: cache off
  std::unique_ptr<rt::BinaryProvider> binaries;
  std::recursive_mutex mutex;   // guards the maps, counters and device info
  // kernel()'s in-process map: (spec as asked, problem bucket) -> the loaded winner. Keyed by numbers,
  // not text, so that a repeated request costs a validation of the problem and one map lookup.
  // Every field of a spec as numbers (generator/spec_schema.hpp): a map key that costs no text.
  using SpecFields = gen::schema::SpecKey;
  static SpecFields spec_fields(const Spec& spec);
  struct RequestKey {
    SpecFields spec{};
    long long q = 0, kv = 0, bh = 0;
    bool operator<(const RequestKey& o) const {
      return std::tie(spec, q, kv, bh) < std::tie(o.spec, o.q, o.kv, o.bh);
    }
  };
  static RequestKey request_key(const Spec& spec, const Problem& problem);
  std::map<RequestKey, std::shared_ptr<rt::LoadedKernel>> by_request;
  std::map<std::string, std::shared_ptr<rt::LoadedKernel>> by_name;
  std::map<std::string, std::pair<rt::Module, std::shared_ptr<rt::Kernel>>> sources;   // quant passes
  RuntimeCounters counters;
  std::mutex workspace_mutex;
  std::map<void*, rt::DeviceBuffer> workspaces;   // attention()'s workspace per stream
  // CUDA graphs: the calls (stream, spec, shape) that ran eagerly, which a capture may then record; the
  // streams a capture recorded a call on, whose outgrown workspaces are kept (retired) rather than
  // freed, since a graph may still read them. Guarded by workspace_mutex.
  // Keyed by numbers (the exact shape: the workspace depends on it), so an eager call pays a lookup only.
  // `call`: what else picks the kernels and the workspace (decode: split count and tiling asked for).
  struct EagerKey {
    void* stream = nullptr;
    SpecFields spec{};
    long long dims[5] = {};
    long long call[6] = {};
    bool operator<(const EagerKey& o) const {
      return std::tie(stream, spec, dims[0], dims[1], dims[2], dims[3], dims[4], call[0], call[1], call[2], call[3], call[4],
                      call[5]) < std::tie(o.stream, o.spec, o.dims[0], o.dims[1], o.dims[2], o.dims[3], o.dims[4], o.call[0],
                                          o.call[1], o.call[2], o.call[3], o.call[4], o.call[5]);
    }
  };
  static EagerKey eager_key(const Spec& spec, const Problem& problem, void* stream);
  std::set<EagerKey> ran_eagerly;
  std::set<void*> captured_streams;
  std::vector<rt::DeviceBuffer> retired_workspaces;
  // Under capture: refuses (bad_input, `what()` names the call; formatted only then, not on the hot
  // path) a call that has not run eagerly on the stream, before anything is enqueued. Returns whether the
  // stream is capturing.
  bool check_capture(const EagerKey& key, void* stream, const std::function<std::string()>& what);
  bool capturing(void* stream);   // whether `stream` is capturing (with the runtime's context current)
  // After a call: records the eager run, or the stream as captured.
  void note_call(const EagerKey& key, void* stream, bool captured);
  // A stream's workspace `ws`, at least `bytes` (grown: the old one retired when captured; under capture
  // a growth is refused, naming `what`).
  rt::DeviceBuffer& stream_workspace(rt::DeviceBuffer& ws, size_t bytes, void* stream, const char* what = "attention()");
  std::map<void*, rt::DeviceBuffer> decode_workspaces;   // decode()'s split partials per stream
  // Linear layers (runtime/calls/linear_call.cpp): refuses a malformed call before any GPU work (bad_input);
  // the route of a call (flow for m, tiling, split-K); per stream, the split-K tile counters and partials.
  static void check_linear_call(const LinearCall& call);
  LinearRoute route_linear(const LinearCall& call);   // the call's shape checked (check_linear_call's first half)
  rt::LinearLaunch make_linear_launch(const LinearCall& call);   // routed, kernel loaded; no pointers
  // linear()'s launches by everything but the pointers (spec fields, m, tiling asked, splits asked, lda,
  // ldw, ldc), so a repeated eager call routes nothing; cleared when a tuned table is installed.
  using LinearKey = std::array<long long, gen::schema::kFieldCount + 9>;
  static LinearKey linear_key(const LinearCall& call);
  std::map<LinearKey, rt::LinearLaunch> linear_launches;
  // Per stream: the tile counters (zero between launches: each launch resets its own) and the fp32 partials,
  // in buffers of their own so that no launch finds another's partials where its counters are.
  struct LinearWorkspace {
    rt::DeviceBuffer counters, partials;
  };
  std::map<void*, LinearWorkspace> linear_workspaces;
  // flow=auto linear calls' tuned dispatch (runtime/tuning/linear_tuning.cpp): the family's stored table,
  // read from the cache once per family (null: none stored, the default rule serves it).
  std::shared_ptr<const LinearDispatch> linear_dispatch(const Spec& resolved);
  std::map<SpecFields, std::shared_ptr<const LinearDispatch>> linear_dispatches;
  // Prefill over a KV cache (AttentionCall::kv_cache): the cache rows read back into a packed K and V and
  // their offsets, in the stream's gather workspace; returns the dense variable-length call over them.
  // gather_mutex is held from the gather until that call is queued, so no other call on the stream
  // reuses the rows in between.
  AttentionCall gather_kv(const AttentionCall& call, void* stream);
  // The gather of such a call decided once (checks the call unless `checked`, and loads the kernel); a
  // plan over a cache keeps it (attention_plan.cpp).
  rt::CacheGather make_gather(const AttentionCall& call, bool checked = false);
  std::map<void*, rt::DeviceBuffer> gather_workspaces;
  std::mutex gather_mutex;
  // Quantized prefill: V's passes (and Q's, when K's run too) on side streams beside the caller's
  // (rt::ExperimentOptions::concurrent_passes, large calls); per caller stream.
  std::mutex fork_mutex;
  std::map<void*, std::unique_ptr<PassFork>> pass_forks;
  // decode()'s tuned choices (decode_dispatch.cpp): the family's stored inflection and split tables,
  // read from the cache once per family (null: none stored), then O(1) array lookups per call.
  struct DecodeRoute {
    Spec spec;       // flow resolved (never automatic)
    Tiling tiling;   // block_m 0: the runtime's default for the flow
    int splits = 0;  // 0: spec.split_k, else plan_decode_splits
  };
  DecodeRoute route_decode(const Spec& resolved, const Problem& p, const Tiling& tiling, int splits);
  std::shared_ptr<const DecodeDispatch> decode_dispatch(const Spec& resolved);
  // By the family's spec fields (flow automatic, no split count): found without building its text.
  std::map<SpecFields, std::shared_ptr<const DecodeDispatch>> decode_dispatches;
  std::vector<std::string> dispatch_warnings;   // stored decisions that could not be used, and why
  // decode()'s unified-max row flags per stream: the workspace, and where the last call's flags went
  // (the workspace or the caller's DecodeCall::row_flags) with their row count.
  struct DecodeFlags {
    rt::DeviceBuffer workspace;
    int* last = nullptr;
    long long rows = 0;
  };
  std::map<void*, DecodeFlags> decode_flags;
  std::optional<rt::DeviceInfo> device_info;
};

}  // namespace qattn

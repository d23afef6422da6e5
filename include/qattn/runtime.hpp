// qattn::Runtime — the front door. Ask for a kernel by spec; get a tuned (or cached) binary, loaded and
// ready to launch on your stream. Also compile-only (no GPU needed) and a high-level attention call that
// quantizes FP16/BF16 inputs itself.
//
// Request flow: in-process map -> SQLite tuned winner (+ stored cubin) -> tuner (render, NVRTC in
// parallel, verify, time) or the default tiling -> SQLite -> module load -> launch.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "qattn/abi.h"
#include "qattn/decode.hpp"
#include "qattn/export.h"
#include "qattn/flashq.hpp"
#include "qattn/inflection.hpp"
#include "qattn/linear.hpp"
#include "qattn/linear_inflection.hpp"
#include "qattn/problem.hpp"
#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"
#include "qattn/tuner.hpp"

QATTN_PUBLIC_BEGIN
namespace qattn {

struct RuntimeOptions {
  std::string cache_path;    // SQLite file; empty: $QATTN_CACHE_DIR/qattn.db or ~/.cache/qattn/qattn.db
  bool use_cache = true;     // false: nothing read from or written to SQLite (in-process map only)
  bool read_only = false;    // open the user cache read-only; nothing is written
  // An application-shipped cache, opened read-only under the user cache: lookups (binaries, tuned
  // winners, decisions) try the user cache first, then this one; writes go to the user cache only.
  // Empty: $QATTN_SHIPPED_CACHE, else none. See README "Caches: layers, shipping, maintenance".
  std::string shipped_cache_path;
  bool tune = true;          // on a miss, tune; false: use the default tiling (no timing runs)
  int device = 0;            // CUDA device ordinal
  // K smoothing (smooth=k / kv) with token-local scales (per_token, per_block, per_warp, per_thread):
  // the channel mean subtracted from K is taken over this many tokens of each head, spread evenly over
  // the sequence (the middle token of each of as many equal strides), when kv_len is longer; 0: every
  // token. Exact either way: subtracting any per-channel vector c from K shifts each score row by q·c,
  // which softmax ignores, and the LSE correction adds back q·c for the very c subtracted. The sample
  // only has to estimate the channel bias that smoothing removes before quantization. Benefit: K's
  // statistics pass reads `k_mean_sample_tokens` rows per head instead of all kv_len (at long sequences
  // it read K once more in full). Cost: codes from a mean that is off by the sample's error (K's
  // per-token scales absorb it).
  int k_mean_sample_tokens = 1024;
  TimingOptions timing;
};

// A compiled binary (compile-only path; no GPU involved).
struct CompiledKernel {
  std::string kernel_name;
  Spec spec;
  Tiling tiling;
  std::vector<unsigned char> cubin;
  std::string ptx;       // only when asked for
  std::string source;    // the rendered translation unit
  std::string log;       // NVRTC + ptxas report
  int registers = -1, spill_bytes = -1, smem_bytes = 0;
  // ptxas serialized the kernel's wgmma pipeline (too few registers, ...): slower, still correct.
  // Known only from a fresh compile's ptxas report (false from the cache).
  bool wgmma_serialized = false;
  double compile_ms = 0;
  bool from_cache = false;
};

// A loaded kernel bound to one device; cheap to look up again (the runtime owns it).
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual const std::string& name() const = 0;
  virtual const Spec& spec() const = 0;
  virtual const Tiling& tiling() const = 0;
  // Launches on `stream` (a CUstream; nullptr = the legacy default stream). Asynchronous.
  virtual void launch(const AttentionParams& params, const Problem& problem, void* stream) const = 0;
};

// Device tensor of the high-level call: element (b, h, s, c) at data + b*sb + h*sh + s*ss + c (elements).
struct TensorView {
  void* data = nullptr;
  long long sb = 0, sh = 0, ss = 0;
};
// Strides of a contiguous [batch, seq, heads, d] ("bshd") or [batch, heads, seq, d] ("bhsd") tensor.
TensorView bshd(void* data, int seq, int heads, int d);
TensorView bhsd(void* data, int seq, int heads, int d);

// A contiguous packed tensor [tokens, heads, d] of a variable-length call (sb unused).
TensorView packed(void* data, int heads, int d);

struct AttentionCall {
  Spec spec;               // arch may be unset (the device's); inputs and output have element type spec.out
  Problem problem;
  TensorView q, k, v, o;   // q, o: heads_q; k, v: heads_kv
  float softmax_scale = 0;   // 0: 1/sqrt(d)
  float* lse = nullptr;      // optional fp32 log-sum-exp (natural log): [b, hq, q], or varlen [total_q, hq]
  // Variable-length batch (both or neither; the spec gets `varlen`): device int [batch + 1] offsets, so
  // that sequence b's queries are rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of the packed q and o and
  // its keys rows [cu_seqlens_kv[b], cu_seqlens_kv[b + 1]) of the packed k and v (TensorView::sb is
  // ignored; packed() gives the contiguous views). problem.batch counts the sequences and problem.q_len /
  // kv_len bound their lengths (a longer sequence is cut to them). Causal masks align at each sequence's
  // end (query i sees keys j <= i + kv_len_b - q_len_b), which is chunked prefill over a cached prefix.
  // A capture may replay with other offsets of the same bounds.
  const int* cu_seqlens_q = nullptr;
  const int* cu_seqlens_kv = nullptr;
  // Prefill over a KV cache (chunked prefill, shared prefixes): with cu_seqlens_q and no cu_seqlens_kv,
  // sequence b's keys and values are the first kv_lens[b] rows of the cache (this chunk's tokens among
  // them, appended before the call); k and v are not read, problem.kv_len bounds kv_lens. See KvSource.
  const struct KvSource* kv_cache = nullptr;
};

// The cache a prefill reads (AttentionCall::kv_cache): decode spec `spec` describes its row format,
// head dim and paging (include/qattn/decode.hpp, the layout of templates/qattn/decode/kv_layout.h; every
// row format, not flashq); its type out= is the call's. The rows are read back as a packed 16-bit tensor
// into a per-stream workspace and the variable-length attention runs on it, so the prefill spec's
// formats apply as for dense inputs.
struct KvSource {
  Spec spec;
  KvCacheView view;
  const int* kv_lens = nullptr;   // device int [batch]
};

// Inputs made ready for the attention kernel: for quantized specs, Q, K and V quantized into a workspace
// owned by this object (the FP16/BF16 inputs may be freed once the stream has passed the quantization);
// for fp16/bf16 specs, just the caller's pointers (which must stay alive). Run it as often as wanted.
class PreparedAttention {
 public:
  virtual ~PreparedAttention() = default;
  virtual const Kernel& kernel() const = 0;
  virtual const Problem& problem() const = 0;
};

// A prefill call decided once and run many times: for engines, CUDA graphs and the lowest host cost.
// Runtime::plan_attention fixes the spec, the shape (variable-length: the bounds), the strides of q, k,
// v and o, and loads the kernels (tuned winner, else per RuntimeOptions::tune); it decides the
// quantization passes and the workspace layout. Runtime::run(plan, ...) then takes pointers only: it
// compiles, tunes, allocates, synchronizes and creates nothing, so a run may be captured in a CUDA graph
// at any time, including the first. Workspace: the plan's own (allocated at plan time) unless the run
// passes one of workspace_bytes(); a plan's own workspace serves one run at a time (order its runs,
// e.g. on one stream), a caller's workspace lets runs on several streams proceed together.
// Over a KV cache (AttentionCall::kv_cache at plan time): the cache's spec, geometry (strides, page
// size, table stride) and the bounds (problem.batch, kv_len, q_len) are the plan's; the workspace also
// holds the cache's rows read back for the bounds (2 x batch x kv_len x heads_kv x d 16-bit values), and
// each run passes the cache's pointers and lengths (AttentionRun::kv_cache) with the same bits as
// attention() over the cache.
class AttentionPlan {
 public:
  virtual ~AttentionPlan() = default;
  virtual const Kernel& kernel() const = 0;
  virtual const Problem& problem() const = 0;
  virtual size_t workspace_bytes() const = 0;   // 0 for fp16/bf16 specs
};

// One run of a plan. Element type, strides and shape are the plan's; variable-length plans take this
// run's offsets (their bounds are the plan's problem; the batch composition may change between runs).
struct AttentionRun {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;             // optional, as AttentionCall::lse
  const int* cu_seqlens_q = nullptr;
  const int* cu_seqlens_kv = nullptr;
  float softmax_scale = 0;          // 0: 1/sqrt(d)
  void* workspace = nullptr;        // null: the plan's own; else workspace_bytes(), 256-byte aligned
  // A plan over a KV cache: this run's cache (its view's pointers and kv_lens; spec and strides are the
  // plan's); k, v and cu_seqlens_kv stay null.
  const KvSource* kv_cache = nullptr;
};

// What Runtime::tune_decode measured and decided (include/qattn/inflection.hpp).
struct DecodeTuning {
  InflectionTable dataflow;   // GEMV vs tensor-core crossings per KV length bucket
  SplitTable splits;          // split count per (batch x heads_kv, KV length) bucket
};

struct RuntimeCounters {
  long long memory_hits = 0;    // kernel requests served by the in-process map
  long long tuned_db_hits = 0;  // tuned winners read from SQLite
  long long binary_db_hits = 0; // cubins read from SQLite instead of compiled
  long long compiles = 0;       // NVRTC compilations
  long long tunings = 0;        // tuner runs
  long long loads = 0;          // modules loaded on the device
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Render + compile (or take the cached cubin) for spec.arch; no GPU needed. Stores the binary.
  CompiledKernel compile(const Spec& spec, const Tiling& tiling, bool want_ptx = false);

  // The helper kernels attention() launches around a quantized kernel (quantization passes, LSE
  // correction), compiled into the cache for spec.arch; none for fp16/bf16 specs. No GPU needed.
  std::vector<CompiledKernel> compile_helpers(const Spec& spec);

  // A launchable kernel for (spec, problem): tuned for the problem's bucket on this device, cached.
  const Kernel& kernel(const Spec& spec, const Problem& problem);
  // Tunes now (ignoring any stored winner), stores and returns the result.
  TuningResult tune(const Spec& spec, const Problem& problem);

  // FP16/BF16 in, FP16/BF16 out; quantizes internally for quantized specs (workspace managed here).
  // Variable-length batches: AttentionCall::cu_seqlens_q / cu_seqlens_kv; the kernel runs the tiling tuned
  // for its equal-length twin (the spec without varlen) at problem's bounds.
  // CUDA graphs: a call may be captured (cuStreamBeginCapture on `stream`) once the same call (spec,
  // shape) ran eagerly on that stream; the capture records its launches only, and a first-time call
  // under capture is refused (bad_input) without touching the capture. The graph replays on the
  // pointers it was captured with, for the runtime's lifetime: a later, larger call on that stream gets
  // a new workspace and keeps the captured one alive.
  void attention(const AttentionCall& call, void* stream);
  // The two halves of attention(): quantize (call.o, softmax_scale and lse are not used) ...
  std::unique_ptr<PreparedAttention> prepare(const AttentionCall& call, void* stream);
  // ... then the attention kernel alone, writing o (element type spec.out).
  void run(const PreparedAttention& prepared, TensorView o, float softmax_scale, float* lse, void* stream);
  // A plan for calls like `call` (its data pointers are not read and may be null; spec.varlen, or the
  // offsets, make it variable-length). own_workspace false: every run passes its workspace.
  std::unique_ptr<AttentionPlan> plan_attention(const AttentionCall& call, bool own_workspace = true);
  // Queues one run of `plan` on `stream`. Checks only what a plan could not: null and misaligned pointers.
  void run(const AttentionPlan& plan, const AttentionRun& run, void* stream);
  // prepare() with an explicit tiling instead of the tuned one (the tuner's verification uses it).
  std::unique_ptr<PreparedAttention> prepare_with(const AttentionCall& call, const Tiling& tiling, void* stream);

  // Decode attention over a KV cache (include/qattn/decode.hpp): the split-K kernel, then (when the
  // call uses more than one split) the combine kernel, on `stream`. The split partials live in a
  // per-stream workspace owned by the runtime. Validates the call (throws bad_input with the reason).
  // CUDA graphs: decode() and append_kv() may be captured once the same call ran eagerly on the stream,
  // as attention() (docs/reliability.md "CUDA graphs"); kv_lens, start and the tokens may change between
  // replays.
  void decode(const DecodeCall& call, void* stream);
  // A plan for decode calls like `call` (its device pointers are not read and may be null; see DecodePlan
  // in decode.hpp). own_workspace false: every run passes its workspace.
  std::unique_ptr<DecodePlan> plan_decode(const DecodeCall& call, bool own_workspace = true);
  // Queues one run of `plan` on `stream`. Checks only what a plan could not: null and misaligned pointers.
  void run(const DecodePlan& plan, const DecodeRun& run, void* stream);
  // Quantizes new tokens into the KV cache (both K and V) on `stream`.
  void append_kv(const AppendKvCall& call, void* stream);
  // A plan for append_kv calls like `call` (its device pointers are not read; see AppendPlan in
  // decode.hpp), and one run of it on `stream` with append_kv()'s bytes.
  std::unique_ptr<AppendPlan> plan_append(const AppendKvCall& call);
  void run(const AppendPlan& plan, const AppendRun& run, void* stream);
  // A linear layer on `stream` (include/qattn/linear.hpp): one kernel, chosen by call.m (flow=auto), with
  // split-K partials in a per-stream workspace owned by the runtime. Validates the call (bad_input with
  // the reason, before any GPU work). CUDA graphs: as decode(), once the same call (spec, m, route) ran
  // eagerly on the stream.
  void linear(const LinearCall& call, void* stream);
  // What linear() launches for `call`: flow, tiling, split-K and kernel name. Launches and loads nothing.
  LinearRoute linear_route(const LinearCall& call);
  // A plan for linear calls like `call` (its device pointers are not read and may be null; see LinearPlan
  // in linear.hpp). own_workspace false: every run with split-K passes its workspace.
  std::unique_ptr<LinearPlan> plan_linear(const LinearCall& call, bool own_workspace = true);
  // Queues one run of `plan` on `stream`. Checks only what a plan could not: null and misaligned pointers, m.
  void run(const LinearPlan& plan, const LinearRun& run, void* stream);
  // Times the three dataflows of the spec's layer over m = 1 .. 8192 on this GPU (options.rows), finds M1
  // and M2 (include/qattn/linear_inflection.hpp), stores the table in the cache (kind linear_dataflow)
  // and uses it at once for flow=auto calls of the family. Minutes per layer shape.
  LinearTable tune_linear(const Spec& spec, const LinearSweepOptions& options = {});
  bool linear_tuned(const Spec& spec);   // a table of the spec's family is stored for this device
  // The split count decode() uses for `call` (call.splits, else spec.split_k, else the tuned split
  // table, else the heuristic).
  int decode_splits(const DecodeCall& call);
  // The kernel decode() runs for `call` over the cache (a flashq cache: over its blocks) and its split
  // count: what flow=auto and the split tables resolve to. Loads the kernel; launches nothing.
  struct DecodeRouteInfo {
    std::string kernel_name;
    Dataflow flow = Dataflow::mma;
    Tiling tiling;
    int splits = 1;
  };
  DecodeRouteInfo decode_route(const DecodeCall& call);
  // Rows the last softmax=unified_max decode() on `stream` recomputed with the exact kernel (its flags
  // != kUmSeen; every row when unified_max was disabled). Synchronizes the stream and reads the flags
  // back: for monitoring the fallback rate, not for the hot path. bad_input when no such call ran.
  long long decode_fallback_rows(void* stream);

  // Decode's tuned dispatch (FlashDecoding++'s inflection points): times the GEMV and tensor-core
  // dataflows over M = gqa x q_len and KV length buckets, and the split counts per (batch x heads_kv, KV
  // length) bucket, on this GPU; stores both decisions in the cache (decision kinds decode_dataflow and
  // decode_splits, key decode_family_key(spec)) and uses them at once for this family's calls with
  // flow=auto (the default) and no split count. Row-cache formats (not flashq). Minutes for the default
  // options; `qattn pretune` runs it offline.
  DecodeTuning tune_decode(const Spec& spec, const SweepOptions& options = {});
  // True when both decisions of the spec's family are stored for this device and toolchain.
  bool decode_tuned(const Spec& spec);

  // The FlashQ KV cache (include/qattn/flashq.hpp): fills an empty cache with the prefill tokens
  // (choosing the head bit widths and universal scales unless given; then it waits for the stream), and
  // one decode step's flush + append, on the device without a host sync.
  FlashQPrefillInfo flashq_prefill(const FlashQPrefillCall& call, void* stream);
  void flashq_append(const FlashQAppendCall& call, void* stream);

  // Kernel-only timing of what attention() launches for (spec, problem): kernel(spec, problem)'s tiling
  // in its launch_form(), on random inputs rotated through L2; microseconds per launch, one sample per
  // timed launch (warm-up excluded).
  std::vector<double> benchmark(const Spec& spec, const Problem& problem, const TimingOptions& timing = {});
  // The tiling attention() and prepare() launch for a chosen one: its fused-Q (_qf) and TMA (_tma) twins
  // where the spec allows them (docs/environment.md: QATTN_FUSE_Q, QATTN_TMA), else the tiling itself.
  Tiling launch_form(const Spec& spec, const Tiling& tiling);
  // Runs kernel(spec, problem) on fresh random data with outliers (seeded by `seed`), poisoned output,
  // in [b, s, h, d] (or [b, h, s, d]) layout, and compares it with a float64 host reference on up to
  // 4 heads x 256 rows spread over the problem (every output element must be finite).
  // passed: all finite, and relative L2 <= 1e-2 (fp16/bf16), or for quantized specs cosine >= 0.995
  // (per_tensor scales 0.99, int4 Q/K 0.98) or, where the format's own numerics (a float64 simulation
  // of the same quantization) miss that floor on this data, an error at most 1.25 x the format's + 0.02
  // (relative L2): a lossy format runs, a wrong kernel does not (docs/design/tuning.md, the gate).
  struct Accuracy {
    bool passed = false;
    double cosine = 0, rel_l2 = 0, max_abs = 0;   // the kernel against exact float64 attention
    long long non_finite = 0;
    double format_cosine = 0, format_rel_l2 = 0;   // the format alone; NaN when the gate did not need it
    std::string verdict;                           // the gate's one-line reason
  };
  Accuracy check(const Spec& spec, const Problem& problem, unsigned long long seed, bool bhsd_layout = false);

  // Fills in the device's arch when spec.arch is unset; validates. Throws bad_input / no_gpu.
  Spec resolve(const Spec& spec);
  RuntimeCounters counters() const;
  const RuntimeOptions& options() const;
  std::string cache_path() const;   // "" when the cache is off
  // Why the cache did less than asked, one line each, oldest first: a layer not opened or set aside, a
  // tuned entry of another driver/device/toolchain (and what was done instead), a dropped binary.
  // Also printed once each on stderr when QATTN_LOG=1.
  std::vector<std::string> cache_warnings() const;
  // The latest cache trouble, one line: a layer that could not be opened as asked, or that failed (locked
  // by another process past the busy budget, damaged, not writable) so that results are not stored.
  // "" while the cache works as opened (or is off). See docs/reliability.md.
  std::string cache_status() const;

  struct QATTN_LOCAL Impl;   // runtime/registry/runtime_impl.hpp; not exported

 private:
  friend struct RuntimeAccess;   // the library's own parts outside this class (runtime/registry/runtime_impl.hpp)
  std::unique_ptr<Impl> impl_;
};

// Library, compiler and driver versions: "qattn 0.1.0, nvrtc 13.0".
std::string version_string();

}  // namespace qattn
QATTN_PUBLIC_END

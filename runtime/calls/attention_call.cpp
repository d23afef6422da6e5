// The high-level call: FP16/BF16 tensors in, quantization (for quantized specs) into a workspace, then
// the attention kernel. prepare() does the first half, run() the second. With K smoothing, prepare()
// also computes q·mean_k per row, which run() adds (scaled) to the LSE when one is asked for.
#include <cmath>
#include <cstdlib>
#include <optional>

#include "qattn/attention/prefill_int8_shape.h"
#include "qattn/error.hpp"
#include "runtime/calls/call_layout.hpp"
#include "runtime/calls/helper_kernels.hpp"
#include <array>
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/registry/runtime_impl.hpp"

namespace qattn {
namespace {

TensorRef ref_of(const TensorView& t) { return TensorRef{t.data, t.sb, t.sh, t.ss, 1}; }

class Prepared final : public PreparedAttention {
 public:
  const Kernel& kernel() const override { return *kernel_; }
  const Problem& problem() const override { return problem_; }
  std::shared_ptr<rt::LoadedKernel> kernel_;
  Problem problem_;
  AttentionParams params{};
  rt::DeviceBuffer workspace;   // owned (prepare()); empty when attention() lends the runtime's own
  // _tma kernels: the parameters with K's and V^T's tensor maps, encoded once (they depend only on K and
  // V, which a prepared call fixes); run() copies in the output, LSE and scale of each launch.
  std::optional<TmaAttentionParams> tma;
  rt::AttentionStage stage;   // quantized: the passes queued, the workspace layout
  // K smoothing shifts the kernel's LSE by softmax_scale * q·mean_k; run() adds it back when asked.
  LseCorrectionParams lse_fix{};
};

void validate_call(const AttentionCall& c, const Spec& spec) {
  Runtime::Impl::require_prefill(spec, c.problem);
  for (const TensorView* t : {&c.q, &c.k, &c.v})
    if (!t->data) throw_bad_input("attention input tensor is null; pass device pointers for q, k and v");
}

// The spec a call runs (before resolving): call.spec, with `varlen` when the call passes sequence offsets.
Spec spec_of(const AttentionCall& c) {
  if (c.kv_cache)
    throw_bad_input("prefill over a KV cache (AttentionCall::kv_cache) runs through attention() only; prepare() takes dense inputs");
  if ((c.cu_seqlens_q == nullptr) != (c.cu_seqlens_kv == nullptr))
    throw_bad_input("a variable-length attention call needs both cu_seqlens_q and cu_seqlens_kv (device int [batch + 1]); "
                    "got only " + std::string(c.cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_kv"));
  Spec spec = c.spec;
  if (c.cu_seqlens_q) spec.varlen = true;
  if (spec.varlen && !c.cu_seqlens_q)
    throw_bad_input("spec '" + to_string(spec) + "' is varlen: pass cu_seqlens_q and cu_seqlens_kv (device int [batch + 1]), "
                    "or drop varlen for a batch of equal lengths");
  return spec;
}

// A variable-length call's tensors are packed [tokens, heads, d]: their batch stride means nothing.
AttentionCall packed_call(const AttentionCall& c, const Spec& spec) {
  AttentionCall out = c;
  if (spec.varlen)
    for (TensorView* t : {&out.q, &out.k, &out.v, &out.o}) t->sb = 0;
  return out;
}

}  // namespace

TensorView packed(void* data, int heads, int d) {
  return TensorView{data, 0, d, static_cast<long long>(heads) * d};
}

void Runtime::Impl::require_prefill(const Spec& spec, const Problem& problem) {
  if (spec.phase != Phase::prefill)
    throw_bad_input("attention() takes prefill specs; run '" + to_string(spec) + "' with Runtime::decode (include/qattn/decode.hpp)");
  require(validate(spec, problem));
}

TensorView bshd(void* data, int seq, int heads, int d) {
  return TensorView{data, static_cast<long long>(seq) * heads * d, d, static_cast<long long>(heads) * d};
}
TensorView bhsd(void* data, int seq, int heads, int d) {
  return TensorView{data, static_cast<long long>(heads) * seq * d, static_cast<long long>(seq) * d, d};
}

// The form attention() and prepare() launch for a chosen tiling: its fused-Q twin and its TMA twin where
// the experiment options and the spec allow them (rt::ExperimentOptions::fuse_q_quant, tma_loads).
Tiling Runtime::Impl::launch_form(const Spec& spec, const Tiling& tiling) {
  if (!spec.quantized()) return tiling;
  Tiling t = tiling;
  if (experiment.fuse_q_quant) t = fused_q_form(spec, t, limits());
  if (experiment.tma_loads) t = tma_form(spec, t, limits());
  return t;
}

Tiling Runtime::launch_form(const Spec& spec, const Tiling& tiling) { return impl_->launch_form(spec, tiling); }

AttentionParams Runtime::Impl::shape_params(const Spec& spec, const Tiling& tiling, const Problem& p) {
  AttentionParams ap{};
  ap.batch = p.batch;
  ap.heads_q = p.heads_q;
  ap.heads_kv = p.heads_kv;
  ap.q_len = p.q_len;
  ap.kv_len = p.kv_len;
  const int band = experiment.causal_band_heads;
  ap.band_heads = band > 0 ? band : gen::attention_band_heads(spec, tiling, p, device().l2_bytes);
  // A persistent launch: as many CTAs as the SMs hold at once (the form fixes its blocks per SM).
  if (tiling.persistent) ap.ctas = device().sm_count * prefill_int8::ws_blocks_per_sm(tiling.warps);
  return ap;
}

std::unique_ptr<PreparedAttention> Runtime::prepare(const AttentionCall& call_in, void* stream) {
  const Spec spec = resolve(spec_of(call_in));
  const AttentionCall call = packed_call(call_in, spec);
  validate_call(call, spec);
  const Kernel& k = kernel(spec, call.problem);
  return impl_->prepare_in(call, spec, launch_form(spec, k.tiling()), stream, nullptr);
}

std::unique_ptr<PreparedAttention> Runtime::prepare_with(const AttentionCall& call, const Tiling& tiling, void* stream) {
  return impl_->prepare_with(call, tiling, stream);
}

std::unique_ptr<PreparedAttention> Runtime::Impl::prepare_with(const AttentionCall& call_in, const Tiling& tiling,
                                                               void* stream) {
  const Spec spec = resolve(spec_of(call_in));
  const AttentionCall call = packed_call(call_in, spec);
  validate_call(call, spec);
  return prepare_in(call, spec, tiling, stream, nullptr);
}

// `lent`: the runtime's per-stream workspace (attention()), grown as needed; null: the prepared call
// owns a workspace of its own (prepare()), so that it can outlive later calls on the stream.
// A lent workspace means a one-shot call: the LSE correction is prepared only when call.lse asks for it
// (prepare() cannot know whether a later run() will, so it always prepares it).
// `spec`: call.spec as resolve() returned it, with the call already validated by the caller.
std::unique_ptr<PreparedAttention> Runtime::Impl::prepare_in(const AttentionCall& call, const Spec& spec, const Tiling& tiling,
                                                             void* stream, rt::DeviceBuffer* lent) {
  const Problem& p = call.problem;
  if (const std::string why = rt::input_layout_problem(spec, tiling, call.q, call.k, call.v); !why.empty())
    throw_bad_input(why);
  auto out = std::make_unique<Prepared>();
  out->problem_ = p;
  out->kernel_ = load(spec, tiling);
  AttentionParams& ap = out->params;
  ap = shape_params(spec, tiling, p);
  ap.cu_q = call.cu_seqlens_q;
  ap.cu_kv = call.cu_seqlens_kv;
  if (!spec.quantized()) {
    ap.q = ref_of(call.q);
    ap.k = ref_of(call.k);
    ap.v = ref_of(call.v);
    return out;
  }
  // Quantized: Q and K as int8 rows [b, h, s, d]; V as int8 V^T per head, padded to kVPadTokens.
  out->stage = stage_attention(spec, p, tiling, /*lse_fix=*/!lent || call.lse != nullptr);
  const rt::AttentionStage& st = out->stage;
  char* base = nullptr;
  if (lent) {
    base = stream_workspace(*lent, st.bytes, stream).as<char>();
  } else {
    out->workspace = rt::DeviceBuffer(st.bytes, options.device);
    base = out->workspace.as<char>();
  }
  StageInputs in;
  in.x = {ref_of(call.q), ref_of(call.k), ref_of(call.v)};
  in.cu_q = call.cu_seqlens_q;
  in.cu_kv = call.cu_seqlens_kv;
  in.problem = p;
  in.head_dim = spec.head_dim;
  if (const std::string why = stage_input_problem(st, in, base); !why.empty()) throw_bad_input(why);
  enqueue_stage(st, in, base, stream, ap, st.lse_fix ? &out->lse_fix : nullptr, st.fork ? &stream_fork(stream) : nullptr);
  if (tiling.tma) out->tma = out->kernel_->tma_params(ap);
  return out;
}

void Runtime::Impl::run(const PreparedAttention& prepared_in, TensorView o, float softmax_scale, float* lse, void* stream) {
  const auto& prepared = dynamic_cast<const Prepared&>(prepared_in);
  if (!o.data) throw_bad_input("attention output tensor is null; pass a device pointer for o");
  if (const std::string why = rt::output_layout_problem(prepared.kernel().spec(), o); !why.empty()) throw_bad_input(why);
  AttentionParams p = prepared.params;
  p.o = ref_of(o);
  if (prepared.kernel().spec().varlen) p.o.sb = 0;   // packed
  p.lse = lse;
  const int d = prepared.kernel().spec().head_dim;
  p.softmax_scale = softmax_scale > 0 ? softmax_scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  if (prepared.tma) {
    TmaAttentionParams tp = *prepared.tma;
    tp.a = p;
    prepared.kernel_->launch(tp, prepared.problem(), stream);
  } else {
    prepared.kernel_->launch(p, prepared.problem(), stream);
  }
  if (lse && prepared.stage.lse_fix) add_lse_fix(prepared.stage, prepared.lse_fix, lse, p.softmax_scale, stream);
}

void Runtime::run(const PreparedAttention& prepared, TensorView o, float softmax_scale, float* lse, void* stream) {
  impl_->run(prepared, o, softmax_scale, lse, stream);
}

Runtime::Impl::EagerKey Runtime::Impl::eager_key(const Spec& spec, const Problem& problem, void* stream) {
  return EagerKey{stream, spec_fields(spec), {problem.batch, problem.heads_q, problem.heads_kv, problem.q_len, problem.kv_len}};
}

rt::DeviceBuffer& Runtime::Impl::stream_workspace(rt::DeviceBuffer& ws, size_t bytes, void* stream, const char* what) {
  if (ws.size() >= bytes) return ws;
  if (capturing(stream))
    throw_bad_input(std::string(what) + " under CUDA-graph capture needs " + std::to_string(bytes) +
                    " bytes of workspace on this stream, which holds " + std::to_string(ws.size()) +
                    "; run the call eagerly on this stream before capturing it");
  if (captured_streams.count(stream) && ws.size() > 0) retired_workspaces.push_back(std::move(ws));
  ws = rt::DeviceBuffer(bytes, options.device);
  return ws;
}

void Runtime::attention(const AttentionCall& call_in, void* stream) {
  if (call_in.kv_cache) {
    std::lock_guard<std::mutex> lock(impl_->gather_mutex);
    attention(impl_->gather_kv(call_in, stream), stream);
    return;
  }
  const Spec spec = resolve(spec_of(call_in));
  const AttentionCall call = packed_call(call_in, spec);
  validate_call(call, spec);
  // Before the quantization passes are queued: a refused output must leave nothing half done.
  if (const std::string why = rt::output_layout_problem(spec, call.o); !why.empty()) throw_bad_input(why);
  // A capture records launches only: compiling, tuning, loading a module or allocating the workspace
  // would break it, so the call must have run eagerly on this stream first (which did all of that).
  const Impl::EagerKey key = Impl::eager_key(spec, call.problem, stream);
  const bool capturing = impl_->check_capture(
      key, stream, [&] { return "attention(" + to_string(spec) + ", " + to_string(call.problem) + ")"; });
  const Tiling tiling = launch_form(spec, kernel(spec, call.problem).tiling());
  // Work on one stream is ordered, so one workspace per stream serves every call on it without a sync;
  // a stream gets a new (larger) one only when a call needs more.
  std::lock_guard<std::mutex> lock(impl_->workspace_mutex);
  rt::DeviceBuffer& ws = impl_->workspaces[stream];
  const auto prepared = impl_->prepare_in(call, spec, tiling, stream, &ws);
  run(*prepared, call.o, call.softmax_scale, call.lse, stream);
  impl_->note_call(key, stream, capturing);
}

bool Runtime::Impl::capturing(void* stream) {
  if (!rt::driver_available()) return false;
  const rt::ContextGuard context(options.device);   // the query needs a current context (the caller may have none)
  return rt::stream_capturing(static_cast<CUstream>(stream));
}

bool Runtime::Impl::check_capture(const EagerKey& key, void* stream, const std::function<std::string()>& what) {
  if (!capturing(stream)) return false;
  std::lock_guard<std::mutex> lock(workspace_mutex);
  if (!ran_eagerly.count(key))
    throw_bad_input(what() + " is being captured into a CUDA graph but has not run on this stream yet; run it once "
                    "eagerly on the same stream first (that compiles and loads its kernels and sizes the "
                    "stream's workspace, which a capture cannot do)");
  return true;
}

// Called with workspace_mutex held.
void Runtime::Impl::note_call(const EagerKey& key, void* stream, bool captured) {
  if (captured) captured_streams.insert(stream);
  else ran_eagerly.insert(key);
}

}  // namespace qattn

// Runtime::plan_attention and Runtime::run(plan): attention() with every decision taken at plan time,
// so that a run is the stage's launches and the kernel's, on pointers given then.
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "env/env.hpp"
#include "qattn/error.hpp"
#include "runtime/calls/attention_stage.hpp"
#include "runtime/calls/call_layout.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/device/launch_graph.hpp"
#include "runtime/device/tma_maps.hpp"
#include "runtime/registry/runtime_impl.hpp"

namespace qattn {
namespace {

constexpr std::uintptr_t kWorkspaceAlign = 256;
// Plan-time checks read data pointers' alignment: a stand-in aligned for every access.
void* const kAlignedStandIn = reinterpret_cast<void*>(kWorkspaceAlign);

TensorRef ref_of(const TensorView& t) { return TensorRef{t.data, t.sb, t.sh, t.ss, 1}; }

class Plan final : public AttentionPlan {
 public:
  const Kernel& kernel() const override { return *kernel_; }
  const Problem& problem() const override { return problem_; }
  size_t workspace_bytes() const override { return stage_offset + stage.bytes; }

  const Runtime::Impl* owner = nullptr;   // the runtime whose side streams and device it uses
  std::shared_ptr<rt::LoadedKernel> kernel_;
  Problem problem_;
  Spec spec;
  AttentionParams params{};   // dims, strides and band; no pointers
  std::array<TensorRef, 3> inputs{};
  TensorView o{};
  rt::AttentionStage stage;
  // Over a KV cache: the gather of its rows, into the workspace's first stage_offset bytes.
  std::optional<rt::CacheGather> gather;
  size_t stage_offset = 0;
  rt::DeviceBuffer own;
  std::unique_ptr<Runtime::Impl::PassFork> fork;
  // _tma: the tensor maps of the last K and V^T a run read (the workspace's, for quantized V), encoded
  // again only when they move.
  mutable std::mutex tma_mutex;
  mutable std::optional<TmaAttentionParams> tma;
  // Runs replayed as CUDA graphs (launch_graph.hpp). Off for a forking stage (its side streams and
  // events are not recorded) and under QATTN_SYNC_LAUNCH (which names a faulting kernel by synchronizing
  // after each launch).
  mutable std::unique_ptr<rt::PlanGraphs> graphs;
};

bool misaligned(const void* p, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes != 0; }

}  // namespace

std::unique_ptr<AttentionPlan> Runtime::plan_attention(const AttentionCall& call_given, bool own_workspace) {
  if (call_given.spec.phase != Phase::prefill)
    throw_bad_input("plan_attention takes prefill specs; run '" + to_string(call_given.spec) +
                    "' with Runtime::decode (include/qattn/decode.hpp)");
  // Over a KV cache: the gather's checks and kernel now, then the plan of the variable-length call over
  // the rows it writes into the workspace.
  std::optional<rt::CacheGather> gather;
  if (call_given.kv_cache) gather = impl_->make_gather(call_given);
  const AttentionCall call_in = gather ? gather->dense_call(call_given, static_cast<char*>(kAlignedStandIn)) : call_given;
  Spec asked = call_in.spec;
  if (call_in.cu_seqlens_q || call_in.cu_seqlens_kv) asked.varlen = true;
  const Spec spec = resolve(asked);
  Impl::require_prefill(spec, call_in.problem);
  AttentionCall call = call_in;
  for (TensorView* t : {&call.q, &call.k, &call.v, &call.o}) {
    if (spec.varlen) t->sb = 0;   // packed [tokens, heads, d]
    t->data = kAlignedStandIn;
  }
  const Tiling tiling = launch_form(spec, kernel(spec, call.problem).tiling());
  if (const std::string why = rt::input_layout_problem(spec, tiling, call.q, call.k, call.v); !why.empty())
    throw_bad_input(why);
  if (const std::string why = rt::output_layout_problem(spec, call.o); !why.empty()) throw_bad_input(why);

  auto plan = std::make_unique<Plan>();
  plan->owner = impl_.get();
  plan->kernel_ = impl_->load(spec, tiling);
  plan->problem_ = call.problem;
  plan->spec = spec;
  plan->inputs = {ref_of(call.q), ref_of(call.k), ref_of(call.v)};
  plan->o = call.o;
  const Problem& p = call.problem;
  plan->params = impl_->shape_params(spec, tiling, p);
  if (gather) plan->stage_offset = (gather->bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
  plan->gather = std::move(gather);
  if (spec.quantized()) {
    plan->stage = impl_->stage_attention(spec, p, tiling, /*lse_fix=*/true);
    Impl::StageInputs in;
    in.x = plan->inputs;
    in.problem = p;
    in.head_dim = spec.head_dim;
    if (const std::string why = Impl::stage_input_problem(plan->stage, in, static_cast<char*>(kAlignedStandIn)); !why.empty())
      throw_bad_input(why);
    if (plan->stage.fork) plan->fork = std::make_unique<Impl::PassFork>(impl_->options.device);
  }
  if (own_workspace && plan->workspace_bytes() > 0) plan->own = rt::DeviceBuffer(plan->workspace_bytes(), impl_->options.device);
  plan->graphs = std::make_unique<rt::PlanGraphs>(
      impl_->options.device, impl_->experiment.plan_graphs && !plan->stage.fork && !env::sync_launch());
  return plan;
}

namespace {

// The plan's launches for one run, as Runtime::run checks and issues them (or records them).
void enqueue_run(Runtime::Impl& impl, const Plan& plan, const AttentionRun& given, void* stream) {
  // The run's own pointers first, then the workspace (a refusal names the first thing wrong with the run).
  if (plan.gather) {
    if (!given.kv_cache)
      throw_bad_input("attention plan run: the plan reads a KV cache; pass kv_cache (the cache's pointers and kv_lens)");
    if (given.k || given.v || given.cu_seqlens_kv)
      throw_bad_input("attention plan run: a plan over a KV cache reads k and v from the cache; leave k, v and cu_seqlens_kv null");
    if (!given.q || !given.o || !given.cu_seqlens_q)
      throw_bad_input("attention plan run: q, o and cu_seqlens_q must be device pointers, got a null one");
  } else {
    if (given.kv_cache) throw_bad_input("attention plan run: the plan was made for dense or packed k and v, not a KV cache");
    if (!given.q || !given.k || !given.v || !given.o)
      throw_bad_input("attention plan run: q, k, v and o must be device pointers, got a null one");
    if (misaligned(given.q, 16) || misaligned(given.k, 16) || misaligned(given.v, 16))
      throw_bad_input("attention plan run: q, k and v must be 16-byte aligned");
  }
  char* const base = given.workspace ? static_cast<char*>(given.workspace) : plan.own.as<char>();
  if (!base && plan.workspace_bytes() > 0)
    throw_bad_input("attention plan run: the plan has no workspace of its own; pass workspace (" +
                    std::to_string(plan.workspace_bytes()) + " bytes)");
  if (misaligned(base, kWorkspaceAlign)) throw_bad_input("attention plan run: workspace must be 256-byte aligned");
  AttentionRun r = given;
  if (plan.gather) {   // the cache's rows into the workspace, then the call over them
    if (misaligned(given.q, 16)) throw_bad_input("attention plan run: q, k and v must be 16-byte aligned");
    plan.gather->enqueue(*given.kv_cache, base, stream, "attention plan run");
    const AttentionCall dense = plan.gather->dense_call(AttentionCall{}, base);
    r.k = dense.k.data;
    r.v = dense.v.data;
    r.cu_seqlens_kv = dense.cu_seqlens_kv;
  }
  TensorView o = plan.o;
  o.data = r.o;
  if (const std::string why = rt::output_layout_problem(plan.spec, o); !why.empty()) throw_bad_input(why);
  if (plan.spec.varlen != (r.cu_seqlens_q != nullptr) || (r.cu_seqlens_q == nullptr) != (r.cu_seqlens_kv == nullptr))
    throw_bad_input(plan.spec.varlen ? "this plan is variable-length: pass cu_seqlens_q and cu_seqlens_kv (device int [batch + 1])"
                                     : "this plan has equal lengths: pass no cu_seqlens");
  AttentionParams ap = plan.params;
  std::array<TensorRef, 3> x = plan.inputs;
  x[0].ptr = const_cast<void*>(r.q);
  x[1].ptr = const_cast<void*>(r.k);
  x[2].ptr = const_cast<void*>(r.v);
  LseCorrectionParams fix{};
  const bool quantized = plan.spec.quantized();
  if (quantized) {
    Runtime::Impl::StageInputs in;
    in.x = x;
    in.cu_q = r.cu_seqlens_q;
    in.cu_kv = r.cu_seqlens_kv;
    in.problem = plan.problem_;
    in.head_dim = plan.spec.head_dim;
    impl.enqueue_stage(plan.stage, in, base + plan.stage_offset, stream, ap, r.lse && plan.stage.lse_fix ? &fix : nullptr, plan.fork.get());
  } else {
    ap.q = x[0], ap.k = x[1], ap.v = x[2];
  }
  ap.cu_q = r.cu_seqlens_q;
  ap.cu_kv = r.cu_seqlens_kv;
  ap.o = ref_of(o);
  ap.lse = r.lse;
  const int d = plan.spec.head_dim;
  ap.softmax_scale = r.softmax_scale > 0 ? r.softmax_scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  if (plan.kernel_->tiling().tma) {
    TmaAttentionParams tp;
    {
      std::lock_guard<std::mutex> lock(plan.tma_mutex);
      if (!plan.tma || plan.tma->a.k.ptr != ap.k.ptr || plan.tma->a.v.ptr != ap.v.ptr) plan.tma = plan.kernel_->tma_params(ap);
      tp = *plan.tma;
    }
    tp.a = ap;
    plan.kernel_->launch(tp, plan.problem_, stream);
  } else {
    plan.kernel_->launch(ap, plan.problem_, stream);
  }
  if (r.lse && quantized && plan.stage.lse_fix) Runtime::Impl::add_lse_fix(plan.stage, fix, r.lse, ap.softmax_scale, stream);
}

}  // namespace

void Runtime::run(const AttentionPlan& plan_in, const AttentionRun& r, void* stream) {
  const auto& plan = dynamic_cast<const Plan&>(plan_in);
  if (plan.owner != impl_.get()) throw_bad_input("attention plan run: the plan was made by another Runtime; run it with that one");
  plan.graphs->run(static_cast<CUstream>(stream), [&] { enqueue_run(*impl_, plan, r, stream); });
}

}  // namespace qattn

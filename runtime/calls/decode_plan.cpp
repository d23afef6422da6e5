// Runtime::plan_decode and Runtime::run(DecodePlan): decode() with every decision taken at plan time, so
// that a run binds pointers and issues (or replays) the launches.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "env/env.hpp"
#include "qattn/error.hpp"
#include "runtime/calls/decode_launch.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/launch_graph.hpp"
#include "runtime/registry/runtime_impl.hpp"

namespace qattn {
namespace {

class Plan final : public DecodePlan {
 public:
  const std::string& kernel_name() const override { return launch.parts.front().kernel->name(); }
  const Problem& problem() const override { return launch.problem; }
  int splits() const override { return launch.slots; }
  size_t workspace_bytes() const override { return flags_offset + launch.flag_bytes(); }

  const Runtime::Impl* owner = nullptr;
  // Bound anew by each run, under run_mutex (a run's parameters live here until they are issued).
  mutable rt::DecodeLaunch launch;
  mutable std::mutex run_mutex;
  size_t flags_offset = 0;   // the row flags after the partials, 256-byte aligned
  rt::DeviceBuffer own;
  std::unique_ptr<rt::PlanGraphs> graphs;
};

bool misaligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % rt::kDecodeWorkspaceAlign != 0; }

}  // namespace

std::unique_ptr<DecodePlan> Runtime::plan_decode(const DecodeCall& call_in, bool own_workspace) {
  // The plan-time checks read the cache view's pointers (null and alignment): aligned stand-ins.
  DecodeCall call = call_in;
  void* const stand_in = reinterpret_cast<void*>(rt::kDecodeWorkspaceAlign);
  int* const int_stand_in = static_cast<int*>(stand_in);
  if (call.spec.qk.fmt == Fmt::flashq) {
    FlashQCacheView& c = call.flashq;
    c.k_blocks = c.v_blocks = c.k_buffer = c.v_buffer = stand_in;
    c.heads = c.compressed_lens = c.buffer_lens = int_stand_in;
    if (call.spec.paged) c.block_table = int_stand_in;
  } else {
    call.cache.k = call.cache.v = stand_in;
    if (call.spec.paged) call.cache.block_table = int_stand_in;
    if (call.spec.qk.gran == Gran::per_head) call.cache.k_head_scale = call.cache.v_head_scale = static_cast<float*>(stand_in);
  }
  auto plan = std::make_unique<Plan>();
  plan->owner = impl_.get();
  Impl::check_decode_call(call, "plan_decode", /*pointers=*/false);
  plan->launch = impl_->make_decode_launch(call);
  plan->flags_offset = rt::align_workspace(plan->launch.partial_bytes());
  if (own_workspace && plan->workspace_bytes() > 0) plan->own = rt::DeviceBuffer(plan->workspace_bytes(), impl_->options.device);
  plan->graphs = std::make_unique<rt::PlanGraphs>(impl_->options.device, impl_->experiment.plan_graphs && !env::sync_launch());
  return plan;
}

void Runtime::run(const DecodePlan& plan_in, const DecodeRun& r, void* stream) {
  const auto& plan = dynamic_cast<const Plan&>(plan_in);
  if (plan.owner != impl_.get()) throw_bad_input("decode plan run: the plan was made by another Runtime; run it with that one");
  char* base = r.workspace ? static_cast<char*>(r.workspace) : plan.own.as<char>();
  if (!base && plan.workspace_bytes() > 0)
    throw_bad_input("decode plan run: the plan has no workspace of its own; pass workspace (" +
                    std::to_string(plan.workspace_bytes()) + " bytes)");
  if (base && misaligned(base)) throw_bad_input("decode plan run: workspace must be 256-byte aligned");
  float* partials = plan.launch.slots > 1 ? reinterpret_cast<float*>(base) : nullptr;
  int* flags = nullptr;
  if (plan.launch.unified_max) flags = r.row_flags ? r.row_flags : reinterpret_cast<int*>(base + plan.flags_offset);
  std::lock_guard<std::mutex> lock(plan.run_mutex);
  rt::bind_decode_run(plan.launch, r, "decode plan run");
  const CUstream cu_stream = static_cast<CUstream>(stream);
  plan.graphs->run(cu_stream, [&] { rt::enqueue_decode(plan.launch, partials, flags, cu_stream); });
}

}  // namespace qattn

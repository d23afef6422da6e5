// Runtime::plan_append and Runtime::run(AppendPlan): append_kv() with every decision taken at plan time,
// so that a run binds pointers and issues (or replays) the launches.
#include <memory>
#include <mutex>
#include <string>

#include "env/env.hpp"
#include "qattn/error.hpp"
#include "runtime/calls/append_launch.hpp"
#include "runtime/device/launch_graph.hpp"
#include "runtime/registry/runtime_impl.hpp"

namespace qattn {
namespace {

class Plan final : public AppendPlan {
 public:
  const std::string& kernel_name() const override { return launch.append->name(); }

  const Runtime::Impl* owner = nullptr;
  // Bound anew by each run, under run_mutex (a run's parameters live here until they are issued).
  mutable rt::AppendLaunch launch;
  mutable std::mutex run_mutex;
  std::unique_ptr<rt::PlanGraphs> graphs;
};

}  // namespace

std::unique_ptr<AppendPlan> Runtime::plan_append(const AppendKvCall& call_in) {
  // The plan-time checks read pointers (null and alignment): aligned stand-ins for the device ones. The
  // write mode is the call's: slot mapping when slot_mapping is non-null, else start.
  AppendKvCall call = call_in;
  void* const stand_in = reinterpret_cast<void*>(rt::kAlign);
  call.k = call.v = call.cache.k = call.cache.v = stand_in;
  if (!call.slot_mapping) call.start = static_cast<const int*>(stand_in);
  if (call.spec.paged) call.cache.block_table = static_cast<const int*>(stand_in);
  if (call.spec.qk.fmt == Fmt::fp8e4m3) call.cache.k_head_scale = call.cache.v_head_scale = static_cast<const float*>(stand_in);
  auto plan = std::make_unique<Plan>();
  plan->owner = impl_.get();
  plan->launch = impl_->make_append_launch(call);
  plan->graphs = std::make_unique<rt::PlanGraphs>(impl_->options.device, impl_->experiment.plan_graphs && !env::sync_launch());
  return plan;
}

void Runtime::run(const AppendPlan& plan_in, const AppendRun& r, void* stream) {
  const auto& plan = dynamic_cast<const Plan&>(plan_in);
  if (plan.owner != impl_.get()) throw_bad_input("append plan run: the plan was made by another Runtime; run it with that one");
  std::lock_guard<std::mutex> lock(plan.run_mutex);
  rt::bind_append_run(plan.launch, r, "append plan run");
  const CUstream cu_stream = static_cast<CUstream>(stream);
  plan.graphs->run(cu_stream, [&] { rt::enqueue_append(plan.launch, cu_stream); });
}

}  // namespace qattn

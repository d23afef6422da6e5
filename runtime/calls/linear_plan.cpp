// Runtime::plan_linear / run(LinearPlan, LinearRun): the launch decided and the kernel loaded once; a run
// binds pointers and launches (capturable, even first).
#include <cstdint>
#include <string>

#include "qattn/error.hpp"
#include "runtime/calls/linear_launch.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/registry/runtime_impl.hpp"

namespace qattn {
namespace {

class LinearPlanImpl final : public LinearPlan {
 public:
  LinearPlanImpl(rt::LinearLaunch launch, int m, int device, bool own_workspace) : launch_(std::move(launch)), m_(m) {
    if (own_workspace && launch_.workspace_bytes > 0) {
      workspace_ = rt::DeviceBuffer(launch_.workspace_bytes, device);
      // The memset runs on the legacy stream, which the caller's non-blocking streams do not wait for:
      // done before the plan is returned.
      workspace_.fill(0);
      rt::synchronize_device(device);
    }
  }
  const LinearRoute& route() const override { return launch_.route; }
  int m() const override { return m_; }
  size_t workspace_bytes() const override { return launch_.workspace_bytes; }
  const rt::LinearLaunch& launch() const { return launch_; }
  char* own_workspace() const { return workspace_.as<char>(); }

 private:
  rt::LinearLaunch launch_;
  int m_;
  rt::DeviceBuffer workspace_;
};

}  // namespace

std::unique_ptr<LinearPlan> Runtime::plan_linear(const LinearCall& call, bool own_workspace) {
  rt::LinearLaunch launch = impl_->make_linear_launch(call);
  return std::make_unique<LinearPlanImpl>(std::move(launch), call.m, impl_->options.device, own_workspace);
}

void Runtime::run(const LinearPlan& plan_in, const LinearRun& run, void* stream) {
  const auto* plan = dynamic_cast<const LinearPlanImpl*>(&plan_in);
  if (!plan) throw_bad_input("run(LinearPlan): the plan was not made by Runtime::plan_linear");
  const rt::LinearLaunch& l = plan->launch();
  const int m = run.m == 0 ? plan->m() : run.m;
  if (m < 1 || m > plan->m())
    throw_bad_input("run(LinearPlan): m=" + std::to_string(run.m) + "; accepted: 0 (the plan's) or 1.." + std::to_string(plan->m()));
  rt::check_linear_pointers(l.route.spec, run.a, run.weights, run.c, "run(LinearPlan)");
  if (run.weights.ldw != 0 && run.weights.ldw != l.params.ldw)
    throw_bad_input("run(LinearPlan): weights.ldw=" + std::to_string(run.weights.ldw) + " but the plan's is " +
                    std::to_string(l.params.ldw) + "; accepted: 0 or the plan's");
  char* workspace = nullptr;
  if (l.workspace_bytes > 0) {
    workspace = run.workspace ? static_cast<char*>(run.workspace) : plan->own_workspace();
    if (!workspace)
      throw_bad_input("run(LinearPlan): the plan has no workspace of its own (made with own_workspace false) and the run "
                      "passes none; accepted: a zeroed, 256-byte aligned buffer of workspace_bytes() = " +
                      std::to_string(l.workspace_bytes));
    if (reinterpret_cast<std::uintptr_t>(workspace) % 256 != 0)
      throw_bad_input("run(LinearPlan): the workspace is not 256-byte aligned");
  }
  // The plan's layout is fixed by its own m (counters first), so runs over fewer tokens use the same places.
  int* counters = workspace ? reinterpret_cast<int*>(workspace) : nullptr;
  float* partials = workspace ? reinterpret_cast<float*>(workspace + l.counter_bytes) : nullptr;
  rt::enqueue_linear(l, m, run.a, run.weights, run.c, counters, partials, static_cast<CUstream>(stream));
}

}  // namespace qattn

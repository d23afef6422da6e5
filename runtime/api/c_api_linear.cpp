// The C API's linear layers (include/qattn/qattn.h, "Linear layers"): qattn_linear_args translated into
// a LinearCall; the C++ call checks it.
#include <cstddef>
#include <memory>

#include "qattn/linear.hpp"
#include "qattn/linear_inflection.hpp"
#include "qattn/runtime.hpp"
#include "runtime/api/c_api_internal.hpp"

namespace qattn::capi {
namespace {

constexpr size_t kLinearFirstSize = sizeof(qattn_linear_args);

qattn_linear_args default_linear_args() {
  qattn_linear_args a{};
  a.struct_size = sizeof a;
  return a;
}

LinearCall linear_call_of(const qattn_linear_args* given) {
  const qattn_linear_args a = read_versioned(given, default_linear_args(), kLinearFirstSize, "args");
  LinearCall c;
  c.spec = spec_of(a.spec, "args.spec");
  if (c.spec.phase != Phase::linear)
    throw_bad_input(std::string("qattn_linear takes a linear spec ('linear a=... w=... out=... n=... k=...'), got '") + a.spec + "'");
  c.m = a.m;
  c.splits = a.splits;
  c.a = a.a, c.lda = a.lda;
  c.weights.w = a.w, c.weights.ldw = a.ldw;
  c.weights.scale = a.w_scale, c.weights.zero = a.w_zero, c.weights.bias = a.bias;
  c.c = a.c, c.ldc = a.ldc;
  if (a.tiling) c.tiling = parse_tiling(a.tiling);
  return c;
}

}  // namespace
}  // namespace qattn::capi

using namespace qattn::capi;

extern "C" {

qattn_status qattn_linear_args_init(qattn_linear_args* args, size_t struct_size) {
  return guarded([&] { init_versioned(args, struct_size, default_linear_args(), kLinearFirstSize, "args"); });
}

qattn_status qattn_linear(qattn_runtime* runtime, const qattn_linear_args* args, void* stream) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    runtime->rt.linear(linear_call_of(args), stream);
  });
}

qattn_status qattn_linear_route(qattn_runtime* runtime, const qattn_linear_args* args, char* name_out, size_t name_len,
                                char* flow_out, size_t flow_len, int* splits_out) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    const qattn::LinearRoute r = runtime->rt.linear_route(linear_call_of(args));
    copy_out(r.kernel, name_out, name_len);
    copy_out(qattn::to_string(r.spec.flow), flow_out, flow_len);
    if (splits_out) *splits_out = r.splits;
  });
}

qattn_status qattn_linear_plan_create(qattn_runtime* runtime, const qattn_linear_args* args, unsigned flags,
                                     qattn_linear_plan** out) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(out, "out");
    *out = nullptr;
    require_workspace_flag_only(flags, "qattn_linear_plan_create");
    auto p = std::make_unique<qattn_linear_plan>();
    p->runtime = runtime;
    p->plan = runtime->rt.plan_linear(linear_call_of(args), (flags & QATTN_PLAN_CALLER_WORKSPACE) == 0);
    *out = p.release();
  });
}

qattn_status qattn_linear_plan_workspace_bytes(const qattn_linear_plan* plan, int64_t* bytes_out) {
  return guarded([&] {
    require_arg(plan, "plan");
    require_arg(bytes_out, "bytes_out");
    *bytes_out = static_cast<int64_t>(plan->plan->workspace_bytes());
  });
}

const char* qattn_linear_plan_kernel_name(const qattn_linear_plan* plan) {
  return plan ? plan->plan->route().kernel.c_str() : "";
}

qattn_status qattn_linear_plan_run(qattn_runtime* runtime, const qattn_linear_plan* plan, const qattn_linear_args* args,
                                   void* workspace, void* stream) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(plan, "plan");
    if (plan->runtime != runtime)
      qattn::throw_bad_input("qattn_linear_plan_run: the plan was made by another runtime; run it with that one");
    const qattn_linear_args a = read_versioned(args, default_linear_args(), kLinearFirstSize, "args");
    qattn::LinearRun r;   // pointers and m only: no spec text is parsed
    r.a = a.a;
    r.weights.w = a.w, r.weights.ldw = a.ldw;
    r.weights.scale = a.w_scale, r.weights.zero = a.w_zero, r.weights.bias = a.bias;
    r.c = a.c;
    r.m = a.m;
    r.workspace = workspace;
    runtime->rt.run(*plan->plan, r, stream);
  });
}

void qattn_linear_plan_destroy(qattn_linear_plan* plan) { delete plan; }

qattn_status qattn_tune_linear(qattn_runtime* runtime, const char* spec, const int* rows, int rows_count, char* json_out,
                               size_t json_len, size_t* json_size_out) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    if (rows_count < 0) qattn::throw_bad_input("rows_count=" + std::to_string(rows_count) + "; accepted: >= 0");
    if (rows_count > 0) require_arg(rows, "rows");
    qattn::LinearSweepOptions o;
    if (rows_count > 0) o.rows.assign(rows, rows + rows_count);
    const std::string json = qattn::dump_decision(runtime->rt.tune_linear(spec_of(spec, "spec"), o));
    copy_out(json, json_out, json_len);
    if (json_size_out) *json_size_out = json.size() + 1;
  });
}

qattn_status qattn_linear_tuned(qattn_runtime* runtime, const char* spec, int* tuned_out) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(tuned_out, "tuned_out");
    *tuned_out = runtime->rt.linear_tuned(spec_of(spec, "spec")) ? 1 : 0;
  });
}

}  // extern "C"

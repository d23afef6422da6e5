// The C API's linear layers (include/qattn/qattn.h, "Linear layers"): qattn_linear_args translated into
// a LinearCall; the C++ call checks it.
#include <cstddef>

#include "qattn/linear.hpp"
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

}  // extern "C"

// Runtime::linear: checks the call (no GPU needed to refuse one), routes m tokens to a dataflow, a tiling
// and a split-K count, and launches one kernel (templates/qattn/linear/).
#include <cstdint>
#include <string>

#include "generator/render.hpp"
#include "generator/search_space.hpp"
#include "qattn/error.hpp"
#include "qattn/linear.hpp"
#include "qattn/linear/linear_shape.h"
#include "runtime/registry/runtime_impl.hpp"

namespace qattn {
namespace {

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// Bytes of one packed W row, and the unit ldw counts in (elements for 16-bit W, else bytes).
long long packed_w_row(const Spec& s) {
  return s.weight.fmt == Fmt::int4 ? s.k / 2 : s.weight.fmt == Fmt::int8 ? s.k : s.k;
}
int ldw_unit_bytes(const Spec& s) { return s.weight.fmt == Fmt::int8 || s.weight.fmt == Fmt::int4 ? 1 : 2; }

std::string ptr_text(const void* p) { return std::to_string(reinterpret_cast<std::uintptr_t>(p)); }

}  // namespace

void Runtime::Impl::check_linear_call(const LinearCall& call) {
  const Spec& s = call.spec;
  if (s.phase != Phase::linear)
    throw_bad_input("linear() takes a linear spec (linear a=... w=... out=... n=... k=...), not " + to_string(s));
  require(validate(s));
  if (call.m < 1) throw_bad_input("linear(): m=" + std::to_string(call.m) + " tokens; accepted: m >= 1");
  const auto need = [&](const void* p, const char* what) {
    if (!p) throw_bad_input(std::string("linear(") + to_string(s) + "): " + what + " is null");
    if (!aligned16(p))
      throw_bad_input(std::string("linear(") + to_string(s) + "): " + what + " at " + ptr_text(p) +
                      " is not 16-byte aligned; the kernels read and write it in 16-byte units");
  };
  need(call.a, "a");
  need(call.c, "c");
  need(call.weights.w, "weights.w");
  const Fmt w = s.weight.fmt;
  if (w == Fmt::int8 || w == Fmt::int4) need(call.weights.scale, "weights.scale");
  if (w == Fmt::int4) need(call.weights.zero, "weights.zero");
  if ((w != Fmt::int8 && w != Fmt::int4) && call.weights.scale)
    throw_bad_input(std::string("linear(") + to_string(s) + "): weights.scale is set but w=" + to_string(w) + " has no scales");
  if (w != Fmt::int4 && call.weights.zero)
    throw_bad_input(std::string("linear(") + to_string(s) + "): weights.zero is set but only w=int4:per_group has zero points");
  if (s.bias) need(call.weights.bias, "weights.bias (the spec says bias)");
  else if (call.weights.bias)
    throw_bad_input(std::string("linear(") + to_string(s) + "): weights.bias is set but the spec has no bias; add the token bias");
  const long long lda = call.lda ? call.lda : s.k, ldc = call.ldc ? call.ldc : s.n;
  const long long ldw = call.weights.ldw ? call.weights.ldw : packed_w_row(s);
  if (lda < s.k || lda % 8 != 0)
    throw_bad_input("linear(): lda=" + std::to_string(lda) + "; accepted: a multiple of 8 elements, >= k=" + std::to_string(s.k));
  if (ldw < packed_w_row(s) || ldw * ldw_unit_bytes(s) % 16 != 0)
    throw_bad_input("linear(): weights.ldw=" + std::to_string(ldw) + (ldw_unit_bytes(s) == 2 ? " elements" : " bytes") +
                    "; accepted: >= a packed row (" + std::to_string(packed_w_row(s)) + ") and a multiple of 16 bytes");
  if (ldc < s.n) throw_bad_input("linear(): ldc=" + std::to_string(ldc) + "; accepted: >= n=" + std::to_string(s.n));
  if (call.splits < 0) throw_bad_input("linear(): splits=" + std::to_string(call.splits) + "; accepted: 0 (chosen) or >= 1");
}

LinearRoute Runtime::Impl::route_linear(const LinearCall& call) {
  check_linear_call(call);
  LinearRoute r;
  r.spec = resolve(call.spec);
  int splits = call.splits;
  if (r.spec.flow == Dataflow::automatic) {
    const std::shared_ptr<const LinearDispatch> table = linear_dispatch(r.spec);
    const LinearChoice choice = table ? table->choose(call.m) : LinearChoice{};
    r.tuned = choice.flow != Dataflow::automatic;
    r.spec.flow = r.tuned ? choice.flow : default_linear_flow(call.m);
    if (splits == 0) splits = choice.splits;
  }
  if (call.tiling.block_m != 0) {
    require(validate(r.spec, call.tiling, limits()));
    r.tiling = call.tiling;
  } else {
    r.tiling = gen::linear_tiling(r.spec, call.m, limits());
  }
  if ((call.m + r.tiling.block_m - 1) / r.tiling.block_m > 65535)
    throw_bad_input("linear(): m=" + std::to_string(call.m) + " tokens need more than 65535 row blocks of " +
                    std::to_string(r.tiling.block_m) + "; split the call");
  const gen::LinearSplit split = gen::linear_split(r.spec, r.tiling, call.m, splits, device().sm_count);
  r.splits = split.splits;
  r.k_split = split.k_split;
  r.kernel = kernel_name(r.spec, r.tiling);
  return r;
}

LinearRoute Runtime::linear_route(const LinearCall& call) { return impl_->route_linear(call); }

void Runtime::linear(const LinearCall& call, void* stream) {
  const LinearRoute r = impl_->route_linear(call);
  Impl::EagerKey key = Impl::eager_key(r.spec, Problem{1, 1, 1, call.m, call.m}, stream);
  key.call[0] = r.tiling.block_m, key.call[1] = r.tiling.block_n, key.call[2] = r.tiling.warps;
  key.call[3] = r.tiling.stages, key.call[4] = r.splits;
  const bool capturing =
      impl_->check_capture(key, stream, [&] { return "linear(" + to_string(r.spec) + ", m=" + std::to_string(call.m) + ")"; });
  const auto kernel = impl_->load(r.spec, r.tiling);
  const gen::LaunchShape shape = gen::linear_launch(r.spec, r.tiling, call.m, r.splits);
  LinearParams p{};
  p.a = call.a;
  p.w = call.weights.w;
  p.w_scale = call.weights.scale;
  p.w_zero = call.weights.zero;
  p.bias = call.weights.bias;
  p.c = call.c;
  p.lda = call.lda ? call.lda : r.spec.k;
  p.ldw = call.weights.ldw ? call.weights.ldw : packed_w_row(r.spec);
  p.ldc = call.ldc ? call.ldc : r.spec.n;
  p.m = call.m;
  p.n = r.spec.n;
  p.k = r.spec.k;
  p.splits = r.splits;
  p.k_split = r.k_split;
  std::lock_guard<std::mutex> lock(impl_->workspace_mutex);
  if (r.splits > 1) {
    // The tile counters (zero between calls: the last CTA of a tile sets its counter back) first, then
    // the fp32 partials. A new buffer is zeroed once, before any kernel sees it.
    const size_t tiles = static_cast<size_t>(shape.grid[0]) * shape.grid[1];
    const size_t counter_bytes = (tiles * sizeof(int) + 255) / 256 * 256;
    const size_t bytes = counter_bytes + static_cast<size_t>(r.splits) * call.m * r.spec.n * sizeof(float);
    rt::DeviceBuffer& ws = impl_->linear_workspaces[stream];
    const size_t before = ws.size();
    rt::DeviceBuffer& grown = impl_->stream_workspace(ws, bytes, stream, "linear()");
    if (grown.size() != before) grown.fill(0);
    p.tile_counters = grown.as<int>();
    p.partial = reinterpret_cast<float*>(grown.as<char>() + counter_bytes);
  }
  kernel->function().launch(rt::Dim3{shape.grid[0], shape.grid[1], shape.grid[2]}, rt::Dim3{shape.block, 1, 1},
                            shape.smem_bytes, static_cast<CUstream>(stream), &p, sizeof(p));
  impl_->note_call(key, stream, capturing);
}

}  // namespace qattn

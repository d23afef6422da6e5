// Runtime::linear and its plan: the call checked before any GPU work, m tokens routed to a dataflow, a
// tiling and a split-K count (the tuned table of the layer, else the default rule), one kernel launched
// (templates/qattn/linear/).
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>

#include "generator/render.hpp"
#include "generator/search_space.hpp"
#include "qattn/error.hpp"
#include "qattn/linear.hpp"
#include "runtime/calls/linear_launch.hpp"
#include "runtime/registry/runtime_impl.hpp"

namespace qattn {
namespace {

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// One packed W row in the unit ldw counts in (elements for 16-bit W, else bytes).
long long packed_w_row(const Spec& s) { return s.weight.fmt == Fmt::int4 ? s.k / 2 : s.k; }
int ldw_unit_bytes(const Spec& s) { return s.weight.fmt == Fmt::int8 || s.weight.fmt == Fmt::int4 ? 1 : 2; }

// Distinct eager call shapes remembered (every m of a few layers); past it the memo starts over.
constexpr size_t kMaxLinearLaunches = 1 << 14;

std::string ptr_text(const void* p) { return std::to_string(reinterpret_cast<std::uintptr_t>(p)); }

// Everything of a call but its pointers: spec, m, strides, split count.
void check_linear_shape(const LinearCall& call) {
  const Spec& s = call.spec;
  if (s.phase != Phase::linear)
    throw_bad_input("linear() takes a linear spec (linear a=... w=... out=... n=... k=...), not " + to_string(s));
  require(validate(s));
  if (call.m < 1) throw_bad_input("linear(): m=" + std::to_string(call.m) + " tokens; accepted: m >= 1");
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

}  // namespace

namespace rt {

void check_linear_pointers(const Spec& s, const void* a, const LinearWeights& weights, const void* c, const char* what) {
  const auto need = [&](const void* p, const char* name) {
    if (!p) throw_bad_input(std::string(what) + "(" + to_string(s) + "): " + name + " is null");
    if (!aligned16(p))
      throw_bad_input(std::string(what) + "(" + to_string(s) + "): " + name + " at " + ptr_text(p) +
                      " is not 16-byte aligned; the kernels read and write it in 16-byte units");
  };
  need(a, "a");
  need(c, "c");
  need(weights.w, "weights.w");
  const Fmt w = s.weight.fmt;
  const bool scaled = w == Fmt::int8 || w == Fmt::int4;
  if (scaled) need(weights.scale, "weights.scale");
  if (w == Fmt::int4) need(weights.zero, "weights.zero");
  if (!scaled && weights.scale)
    throw_bad_input(std::string(what) + "(" + to_string(s) + "): weights.scale is set but w=" + to_string(w) + " has no scales");
  if (w != Fmt::int4 && weights.zero)
    throw_bad_input(std::string(what) + "(" + to_string(s) + "): weights.zero is set but only w=int4:per_group has zero points");
  if (s.bias) need(weights.bias, "weights.bias (the spec says bias)");
  else if (weights.bias)
    throw_bad_input(std::string(what) + "(" + to_string(s) + "): weights.bias is set but the spec has no bias; add the token bias");
}

void enqueue_linear(const LinearLaunch& l, int m, const void* a, const LinearWeights& weights, void* c, int* counters,
                    float* partials, CUstream stream) {
  LinearParams p = l.params;
  p.a = a;
  p.w = weights.w;
  p.w_scale = weights.scale;
  p.w_zero = weights.zero;
  p.bias = weights.bias;
  p.c = c;
  p.m = m;
  p.tile_counters = counters;
  p.partial = partials;
  Dim3 grid = l.grid;
  grid.y = static_cast<unsigned>((m + l.route.tiling.block_m - 1) / l.route.tiling.block_m);
  l.kernel->function().launch(grid, l.block, l.smem_bytes, stream, p);
}

}  // namespace rt

void Runtime::Impl::check_linear_call(const LinearCall& call) {
  check_linear_shape(call);
  rt::check_linear_pointers(call.spec, call.a, call.weights, call.c, "linear");
}

LinearRoute Runtime::Impl::route_linear(const LinearCall& call) {
  LinearRoute r;
  r.spec = resolve(call.spec);
  int splits = call.splits;
  Tiling tuned_tiling{0, 0, 0, 0};
  if (r.spec.flow == Dataflow::automatic) {
    const std::shared_ptr<const LinearDispatch> table = linear_dispatch(r.spec);
    const LinearChoice choice = table ? table->choose(call.m) : LinearChoice{};
    r.tuned = choice.flow != Dataflow::automatic;
    r.spec.flow = r.tuned ? choice.flow : default_linear_flow(call.m);
    if (splits == 0) splits = choice.splits;
    tuned_tiling = choice.tiling;
  }
  if (call.tiling.block_m != 0) {
    require(validate(r.spec, call.tiling, limits()));
    r.tiling = call.tiling;
  } else if (tuned_tiling.block_m != 0 && validate(r.spec, tuned_tiling, limits())) {
    r.tiling = tuned_tiling;
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

rt::LinearLaunch Runtime::Impl::make_linear_launch(const LinearCall& call) {
  check_linear_shape(call);
  rt::LinearLaunch l;
  l.route = route_linear(call);
  const Spec& s = l.route.spec;
  l.kernel = load(s, l.route.tiling);
  const gen::LaunchShape shape = gen::linear_launch(s, l.route.tiling, call.m, l.route.splits);
  l.grid = rt::Dim3{shape.grid[0], shape.grid[1], shape.grid[2]};
  l.block = rt::Dim3{shape.block, 1, 1};
  l.smem_bytes = shape.smem_bytes;
  l.params.lda = call.lda ? call.lda : s.k;
  l.params.ldw = call.weights.ldw ? call.weights.ldw : packed_w_row(s);
  l.params.ldc = call.ldc ? call.ldc : s.n;
  l.params.m = call.m;
  l.params.n = s.n;
  l.params.k = s.k;
  l.params.splits = l.route.splits;
  l.params.k_split = l.route.k_split;
  if (l.route.splits > 1) {
    const size_t tiles = static_cast<size_t>(shape.grid[0]) * shape.grid[1];
    l.counter_bytes = (tiles * sizeof(int) + 255) / 256 * 256;
    l.workspace_bytes = l.counter_bytes + static_cast<size_t>(l.route.splits) * call.m * s.n * sizeof(float);
  }
  return l;
}

LinearRoute Runtime::linear_route(const LinearCall& call) {
  check_linear_shape(call);
  return impl_->route_linear(call);
}

Runtime::Impl::LinearKey Runtime::Impl::linear_key(const LinearCall& call) {
  LinearKey key{};
  const SpecFields spec = spec_fields(call.spec);
  std::copy(spec.begin(), spec.end(), key.begin());
  const Tiling& t = call.tiling;
  long long* rest = key.data() + spec.size();
  const long long tail[9] = {call.m, t.block_m, t.block_n, t.warps, t.stages + (t.wgmma ? 1000 : 0), call.splits,
                             call.lda, call.weights.ldw, call.ldc};
  std::copy(std::begin(tail), std::end(tail), rest);
  return key;
}

void Runtime::linear(const LinearCall& call, void* stream) {
  Impl::check_linear_call(call);
  const Impl::LinearKey memo = Impl::linear_key(call);
  rt::LinearLaunch l;
  {
    std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
    if (auto it = impl_->linear_launches.find(memo); it != impl_->linear_launches.end()) l = it->second;
  }
  if (!l.kernel) {
    l = impl_->make_linear_launch(call);
    std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
    if (impl_->linear_launches.size() >= kMaxLinearLaunches) impl_->linear_launches.clear();   // bounded, rebuilt on demand
    impl_->linear_launches[memo] = l;
  }
  Impl::EagerKey key = Impl::eager_key(l.route.spec, Problem{1, 1, 1, call.m, call.m}, stream);
  key.call[0] = l.route.tiling.block_m, key.call[1] = l.route.tiling.block_n, key.call[2] = l.route.tiling.warps;
  key.call[3] = l.route.tiling.stages, key.call[4] = l.route.splits;
  const bool capturing = impl_->check_capture(
      key, stream, [&] { return "linear(" + to_string(l.route.spec) + ", m=" + std::to_string(call.m) + ")"; });
  std::lock_guard<std::mutex> lock(impl_->workspace_mutex);
  int* counters = nullptr;
  float* partials = nullptr;
  if (l.workspace_bytes > 0) {
    // A new counter buffer is zeroed once, on the call's stream before the kernel; every launch leaves its
    // counters at zero again.
    Runtime::Impl::LinearWorkspace& ws = impl_->linear_workspaces[stream];
    const size_t before = ws.counters.size();
    rt::DeviceBuffer& grown = impl_->stream_workspace(ws.counters, l.counter_bytes, stream, "linear()");
    if (grown.size() != before) grown.fill_async(0, static_cast<CUstream>(stream));
    counters = grown.as<int>();
    partials = impl_->stream_workspace(ws.partials, l.workspace_bytes - l.counter_bytes, stream, "linear()").as<float>();
  }
  rt::enqueue_linear(l, call.m, call.a, call.weights, call.c, counters, partials, static_cast<CUstream>(stream));
  impl_->note_call(key, stream, capturing);
}

}  // namespace qattn

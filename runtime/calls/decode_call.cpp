// Decode over a KV cache (include/qattn/decode.hpp): checks the call, picks the tiling and the split
// count, launches the split-K kernel and (with more than one split) the combine kernel; appends new
// tokens into a cache. The split partials live in a per-stream workspace of the runtime.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "qattn/decode/decode_shape.h"
#include "qattn/error.hpp"
#include "generator/render.hpp"
#include "generator/render_helpers.hpp"
#include "generator/search_space.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/calls/decode_launch.hpp"
#include "runtime/calls/kv_cache_view.hpp"
#include "runtime/registry/runtime_impl.hpp"

namespace qattn {
namespace {

using rt::aligned;
using rt::cache_ref;
using rt::CacheGeometry;
using rt::check_cache;
using rt::geometry;
using rt::dense_ref;
using rt::kAlign;

// flashq (flashq.hpp): what decode() reads of the view. The writes (flashq_prefill / flashq_append)
// check the rest.
void check_flashq_view(const Spec& spec, const FlashQCacheView& c, int heads_kv, const char* what) {
  if (!c.k_blocks || !c.v_blocks || !c.k_buffer || !c.v_buffer || !c.heads || !c.compressed_lens || !c.buffer_lens)
    throw_bad_input(std::string(what) + ": a flashq cache needs device pointers k_blocks, v_blocks, k_buffer, v_buffer, heads, "
                    "compressed_lens and buffer_lens (one is null)");
  if (static_cast<int>(c.bits.k_bits.size()) != heads_kv || static_cast<int>(c.bits.v_bits.size()) != heads_kv)
    throw_bad_input(std::string(what) + ": flashq cache.bits needs the K and V bit width of each of the " +
                    std::to_string(heads_kv) + " KV heads (flashq_prefill returns them)");
  if (!aligned(c.k_blocks) || !aligned(c.v_blocks) || !aligned(c.k_buffer) || !aligned(c.v_buffer) ||
      c.k_page_stride % kAlign || c.v_page_stride % kAlign || c.buffer_page_stride % kAlign || c.buffer_head_stride % kAlign)
    throw_bad_input(std::string(what) + ": flashq blocks, buffers and their strides must be multiples of 16 bytes");
  if (spec.paged ? (!c.block_table || c.table_stride < 1) : c.max_blocks < 1)
    throw_bad_input(std::string(what) + (spec.paged ? ": a paged flashq cache needs block_table and table_stride >= 1"
                                                    : ": a contiguous flashq cache needs max_blocks >= 1"));
}

long long flashq_page_stride(const FlashQCacheView& c, int d, int which) {
  const long long given = which == 0 ? c.k_page_stride : c.v_page_stride;
  return given ? given : flashq_layout(d, which == 0 ? c.bits.k_bits : c.bits.v_bits).page_bytes;
}



int rows_per_kv_head(const Spec& spec, const Problem& p) { return spec.gqa * p.q_len; }

Tiling decode_tiling(const Spec& spec, const Tiling& requested, const Problem& problem, const DeviceLimits& limits) {
  if (requested.block_m == 0) return gen::decode_tiling(spec, rows_per_kv_head(spec, problem), limits);
  require(validate(spec, requested, limits));
  return requested;
}

// Tokens of one warp chunk: a flashq block, else block_n rows (split_tokens is a multiple of it).
int chunk_tokens(const Spec& spec, const Tiling& t) { return spec.qk.fmt == Fmt::flashq ? kv::kFlashQBlock : t.block_n; }

// CTAs of a decode launch that can be resident at once: the tiling's shared memory, threads and the
// compiled kernel's registers (allocated per warp in units of 256) each bound the blocks per SM.
int resident_ctas(const DeviceLimits& limits, int sm_count, int smem, int warps, int registers) {
  const int per_warp_regs = (registers * 32 + 255) / 256 * 256;
  const int by_regs = registers > 0 ? 65536 / (warps * per_warp_regs) : 64;
  const int by_smem = limits.smem_per_sm / (smem + limits.smem_reserved_per_block);
  const int by_threads = limits.max_threads_per_sm / (warps * 32);
  return sm_count * std::max(1, std::min({by_regs, by_smem, by_threads}));
}

// Each CTA pays a fixed cost (its pipeline fill, its partial's write), which dominates short splits: so at least kMinChunksPerWarp chunks per warp. And a last wave that is mostly
// empty costs a whole wave: so the split count keeps the resident CTAs at least kMinBusy busy.
constexpr int kMinChunksPerWarp = 4;
constexpr double kMinBusy = 0.95;

}  // namespace

DecodeSplits plan_decode_splits(int requested, int kv_len, int block_n, int warps, long long units, int capacity) {
  const int chunks = (kv_len + block_n - 1) / block_n;
  int splits = requested;
  if (splits <= 0) {
    // Fewest splits that keep the resident CTAs >= kMinBusy busy over every wave; each warp keeps at
    // least kMinChunksPerWarp chunks.
    const int most = std::max(1, chunks / (kMinChunksPerWarp * warps));
    double best = -1;
    for (int s = 1; s <= most; ++s) {
      const long long ctas = units * s;
      const double busy = static_cast<double>(ctas) / (static_cast<double>((ctas + capacity - 1) / capacity) * capacity);
      if (busy > best + 1e-9) {
        best = busy;
        splits = s;
      }
      if (busy >= kMinBusy) break;
    }
  }
  splits = std::max(1, std::min(splits, chunks));
  DecodeSplits plan;
  plan.split_tokens = (chunks + splits - 1) / splits * block_n;
  plan.splits = (kv_len + plan.split_tokens - 1) / plan.split_tokens;
  return plan;
}

int kv_row_bytes(const Spec& spec) { return kv::row_bytes(spec.qk.fmt, spec.qk.gran, spec.head_dim); }

long long kv_cache_bytes(const Spec& spec, int batch, int heads_kv, int capacity) {
  return static_cast<long long>(batch) * heads_kv * capacity * kv_row_bytes(spec);
}

// The tiling, the loaded kernel and the split plan of a call (the split count: the call's, else the
// spec's, else plan_decode_splits over this device's resident CTAs).
struct Runtime::Impl::DecodeKernelChoice {
  Tiling tiling;
  std::shared_ptr<rt::LoadedKernel> kernel;
  DecodeSplits splits;
};

Runtime::Impl::DecodeKernelChoice Runtime::Impl::choose_decode(const Spec& spec, const Problem& p, const Tiling& requested,
                                                      int requested_splits) {
  DecodeKernelChoice plan;
  const DeviceLimits lim = limits();
  plan.tiling = decode_tiling(spec, requested, p, lim);
  plan.kernel = load(spec, plan.tiling);
  const long long units = static_cast<long long>(p.batch) * p.heads_kv *
                          ((rows_per_kv_head(spec, p) + plan.tiling.block_m - 1) / plan.tiling.block_m);
  const int capacity = resident_ctas(lim, device().sm_count, kernel_smem_bytes(spec, plan.tiling), plan.tiling.warps,
                                     plan.kernel->function().registers());
  const int requested_count = requested_splits > 0 ? requested_splits : spec.split_k;
  plan.splits = plan_decode_splits(requested_count, p.kv_len, chunk_tokens(spec, plan.tiling), plan.tiling.warps, units,
                                   capacity);
  return plan;
}

namespace {

// softmax=unified_max: the exact kernel that recomputes the flagged rows (or, with the unified max
// disabled, every row).
Spec exact_softmax(Spec spec) {
  spec.softmax = SoftmaxMode::exact;
  return spec;
}

// The spec of the first kernel decode() launches: a disabled unified max runs the exact one alone.
Spec first_kernel_spec(const Spec& spec, const DecodeCall& call) {
  const bool disabled = spec.softmax == SoftmaxMode::unified_max && !call.unified_max.enabled;
  return disabled ? exact_softmax(spec) : spec;
}

// flashq: the kernel over the compressed blocks (never masked: the new tokens are in the buffer), and
// the int8:per_token kernel over the INT8 buffer (contiguous; masked as the spec says).
Spec blocks_spec(Spec spec) {
  if (spec.qk.fmt == Fmt::flashq) spec.causal = false;
  return spec;
}
Spec buffer_spec(Spec spec) {
  spec.qk = spec.pv = Operand{Fmt::int8, Gran::per_token};
  spec.paged = false;
  spec.split_k = 0;
  return spec;
}

}  // namespace

int Runtime::decode_splits(const DecodeCall& call) { return decode_route(call).splits; }

Runtime::DecodeRouteInfo Runtime::decode_route(const DecodeCall& call) {
  const Runtime::Impl::DecodeRoute route = impl_->route_decode(resolve(call.spec), call.problem, call.tiling, call.splits);
  const Spec spec = blocks_spec(first_kernel_spec(route.spec, call));
  const Runtime::Impl::DecodeKernelChoice plan = impl_->choose_decode(spec, call.problem, route.tiling, route.splits);
  return DecodeRouteInfo{plan.kernel->name(), spec.flow, plan.tiling, plan.splits.splits};
}

long long Runtime::decode_fallback_rows(void* stream) {
  int* flags = nullptr;
  long long rows = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->workspace_mutex);
    const auto it = impl_->decode_flags.find(stream);
    if (it == impl_->decode_flags.end())
      throw_bad_input("decode_fallback_rows: no softmax=unified_max decode() ran on this stream");
    flags = it->second.last;
    rows = it->second.rows;
  }
  const int device = impl_->options.device;
  {
    rt::ContextGuard guard(device);
    QATTN_CU(cuStreamSynchronize, static_cast<CUstream>(stream));
  }
  std::vector<int> host(static_cast<size_t>(rows));
  rt::copy_to_host(host.data(), reinterpret_cast<CUdeviceptr>(flags), host.size() * sizeof(int), device);
  return count_fallback_rows(host.data(), host.size());
}

void Runtime::Impl::check_decode_call(const DecodeCall& call, const char* what, bool pointers) {
  if (call.spec.softmax == SoftmaxMode::unified_max) check_unified_max(call.spec, call.unified_max);
  if (call.spec.phase != Phase::decode)
    throw_bad_input(std::string(what) + " takes a decode spec (got '" + to_string(call.spec) + "'); use attention() for prefill");
  const Problem& p = call.problem;
  require(validate(call.spec, p));
  const bool flashq = call.spec.qk.fmt == Fmt::flashq;
  if (pointers && (!call.q || !call.o || (!flashq && !call.kv_lens)))
    throw_bad_input(std::string(what) + ": q, o and kv_lens must be device pointers (one is null)");
  if (flashq && call.cache.k_mean)
    throw_bad_input(std::string(what) + ": a flashq cache has no K smoothing vector (cache.k_mean is for the row formats)");
  if (flashq) check_flashq_view(call.spec, call.flashq, p.heads_kv, what);
  else check_cache(call.spec, call.cache, p.heads_kv, p.kv_len, what);
  if (call.splits < 0) throw_bad_input(std::string(what) + ": splits must be >= 0 (0: the runtime chooses)");
}

rt::DecodeLaunch Runtime::Impl::make_decode_launch(const DecodeCall& call) {
  const Problem& p = call.problem;
  const bool umax = call.spec.softmax == SoftmaxMode::unified_max;
  const bool flashq = call.spec.qk.fmt == Fmt::flashq;
  // flow=auto and an unset split count: the tuned tables' choice (decode_dispatch.cpp).
  const Runtime::Impl::DecodeRoute route = route_decode(resolve(call.spec), p, call.tiling, call.splits);
  rt::DecodeLaunch l;
  l.spec = route.spec;
  l.problem = p;
  l.device = options.device;
  l.unified_max = umax;
  l.rows = static_cast<long long>(p.batch) * p.heads_q * p.q_len;
  const int d = l.spec.head_dim;
  const Spec first = first_kernel_spec(l.spec, call);
  DecodeParams common{};
  common.q = dense_ref(nullptr, call.q_sb, call.q_sh, call.q_ss, p.heads_q, p.q_len, d);
  common.o = dense_ref(nullptr, call.o_sb, call.o_sh, call.o_ss, p.heads_q, p.q_len, d);
  common.batch = p.batch;
  common.heads_q = p.heads_q;
  common.heads_kv = p.heads_kv;
  common.q_len = p.q_len;
  if (umax) {
    constexpr double kLog2e = 1.4426950408889634;   // the kernel's units: x * log2 e
    common.um_phi2 = static_cast<float>(call.unified_max.phi * kLog2e);
    common.um_lo2 = static_cast<float>(call.unified_max.lo * kLog2e);
    common.um_hi2 = static_cast<float>(call.unified_max.hi * kLog2e);
  }
  auto add_part = [&](const Spec& part_spec, const Problem& part_problem, const Tiling& tiling, int splits, bool buffer) {
    const Runtime::Impl::DecodeKernelChoice choice = choose_decode(part_spec, part_problem, tiling, splits);
    rt::DecodePart part;
    part.spec = part_spec;
    part.tiling = choice.tiling;
    part.kernel = choice.kernel;
    part.dp = common;
    part.grid_x = buffer ? 1 : choice.splits.splits;
    part.flashq_buffer = buffer;
    part.dp.split_tokens = choice.splits.split_tokens;
    const gen::LaunchShape shape = gen::decode_launch(part_spec, choice.tiling, p, part.grid_x);
    part.grid = rt::Dim3{shape.grid[0], shape.grid[1], shape.grid[2]};
    part.block = rt::Dim3{shape.block, 1, 1};
    part.smem_bytes = shape.smem_bytes;
    l.parts.push_back(std::move(part));
  };
  // The cache itself (row formats) or the flashq blocks: split over the CTAs.
  add_part(blocks_spec(first), p, route.tiling, route.splits, false);
  int slots = l.parts.front().grid_x, tail_slot = 0;
  if (flashq) {
    // The INT8 buffer (at most kFlashQBufferRows tokens, holding the new ones): one CTA per row block,
    // writing the last slot.
    const FlashQCacheView& c = call.flashq;
    Problem bp = p;
    bp.kv_len = kv::kFlashQBufferRows;
    add_part(buffer_spec(first), bp, Tiling{0, 0, 0, 0}, 1, true);
    l.parts.back().dp.split_base = slots;
    tail_slot = 1;
    slots += 1;
    l.fq_page[0] = flashq_page_stride(c, d, 0);
    l.fq_page[1] = flashq_page_stride(c, d, 1);
    l.fq_buffer_head = c.buffer_head_stride ? c.buffer_head_stride : flashq_buffer_head_stride(d);
    l.fq_buffer_page = c.buffer_page_stride ? c.buffer_page_stride : p.heads_kv * l.fq_buffer_head;
    l.parts.front().dp.table_stride = l.spec.paged ? c.table_stride : c.max_blocks;
  } else {
    l.geometry = geometry(l.spec, call.cache, p.heads_kv);
    rt::DecodePart& part = l.parts.front();
    part.dp.page_size = call.cache.page_size;
    part.dp.table_stride = call.cache.table_stride;
  }
  l.slots = slots;
  for (rt::DecodePart& part : l.parts) part.dp.splits = slots;
  if (slots > 1) {
    l.combine = load_helper(gen::decode_combine_kernel(l.spec), [&] { return gen::render_decode_combine(l.spec); });
    DecodeCombineParams& cp = l.combine_params;
    cp.batch = p.batch;
    cp.heads_q = p.heads_q;
    cp.q_len = p.q_len;
    cp.splits = slots;
    cp.split_tokens = l.parts.front().dp.split_tokens;
    cp.tail_slot = tail_slot;
  }
  if (umax && call.unified_max.enabled)   // the exact kernels of the same tilings and splits, for the flagged rows
    for (rt::DecodePart& part : l.parts) part.fallback = load(exact_softmax(part.spec), part.tiling);
  if (!flashq && call.cache.k_mean) {   // a K-smoothed cache: the returned LSE is that of the true keys
    l.lse_fix = load_helper(gen::kv_smooth_kernel(l.spec, "lsefix"), [&] { return gen::render_kv_smooth(l.spec, "lsefix"); });
    KvSmoothParams& fp = l.lse_fix_params;
    fp.x = common.q;
    fp.batch = p.batch;
    fp.heads = p.heads_q;
    fp.heads_kv = p.heads_kv;
    fp.rows = p.q_len;
  }
  return l;
}

void Runtime::Impl::decode(const DecodeCall& call, void* stream) {
  // The call's own checks come before resolve(): no GPU is needed to refuse a malformed call.
  check_decode_call(call, "decode", /*pointers=*/true);
  // CUDA graphs, as attention(): a capture records launches only, so the same call (spec, shape, split
  // count and tiling asked for) must have run eagerly on this stream first.
  const Spec requested = resolve(call.spec);
  EagerKey key = eager_key(requested, call.problem, stream);
  const long long asked[5] = {call.splits, call.tiling.block_m, call.tiling.block_n, call.tiling.warps, call.tiling.stages};
  std::copy(std::begin(asked), std::end(asked), std::begin(key.call));
  key.call[5] = call.cache.k_mean != nullptr;   // a K-smoothed cache adds the LSE fix's kernel
  const bool capturing = check_capture(key, stream, [&] { return "decode(" + to_string(requested) + ", " + to_string(call.problem) + ")"; });
  rt::DecodeLaunch l = make_decode_launch(call);
  rt::bind_decode_run(l, rt::run_of(call), "decode");
  std::lock_guard<std::mutex> lock(workspace_mutex);
  float* partials = nullptr;
  if (l.slots > 1) partials = stream_workspace(decode_workspaces[stream], l.partial_bytes(), stream, "decode()").as<float>();
  int* flags = nullptr;
  if (l.unified_max) {
    Runtime::Impl::DecodeFlags& f = decode_flags[stream];
    flags = call.row_flags;
    if (!flags) flags = stream_workspace(f.workspace, l.flag_bytes(), stream, "decode()").as<int>();
    f.last = flags;
    f.rows = l.rows;
  }
  rt::enqueue_decode(l, partials, flags, static_cast<CUstream>(stream));
  note_call(key, stream, capturing);
}

void Runtime::decode(const DecodeCall& call, void* stream) { impl_->decode(call, stream); }

namespace {

void check_append(const AppendKvCall& call) {
  if (call.spec.phase != Phase::decode) throw_bad_input("append_kv() takes a decode spec (got '" + to_string(call.spec) + "')");
  if (call.batch < 1 || call.heads_kv < 1 || call.n_new < 1)
    throw_bad_input("append_kv: batch, heads_kv and n_new must be >= 1");
  const bool by_slot = call.slot_mapping != nullptr;
  if (!call.k || !call.v || (!call.start && !by_slot))
    throw_bad_input("append_kv: k, v and start (or slot_mapping) must be device pointers (one is null)");
  if (by_slot && call.start) throw_bad_input("append_kv: give start or slot_mapping, not both");
  if (by_slot && call.batch != 1)
    throw_bad_input("append_kv: with slot_mapping the tokens are one batch (batch 1, k and v [n_new, heads_kv, d]); got batch " +
                    std::to_string(call.batch));
  if (by_slot && call.num_slots < 1)
    throw_bad_input("append_kv: slot_mapping needs num_slots >= 1, the cache's rows per head (pages x page_size, or "
                    "sequences x capacity); got " + std::to_string(call.num_slots));
  // Positions are on the device; the caller guarantees start[b] + n_new fits (checked here for the
  // first token only through the cache size). Slots are bounded on the device by num_slots.
  check_cache(call.spec, call.cache, call.heads_kv, by_slot ? 1 : call.n_new, "append_kv");
  if (call.init_k_mean && !call.cache.k_mean)
    throw_bad_input("append_kv: init_k_mean sets cache.k_mean, which is null; pass a device fp32 [heads_kv, d] buffer");
}

}  // namespace

rt::AppendLaunch Runtime::Impl::make_append_launch(const AppendKvCall& call) {
  check_append(call);
  rt::AppendLaunch l;
  l.spec = resolve(call.spec);
  const Spec& spec = l.spec;
  l.by_slot = call.slot_mapping != nullptr;
  l.k_smoothing = call.cache.k_mean != nullptr;
  l.geometry = geometry(spec, call.cache, call.heads_kv);
  l.append = load_helper(gen::kv_row_kernel(KernelFamily::kv_append, spec), [&] { return gen::render_kv_append(spec); });
  KvAppendParams& ap = l.params;
  ap.x = dense_ref(nullptr, call.sb, call.sh, call.ss, call.heads_kv, call.n_new, spec.head_dim);
  ap.num_slots = call.num_slots;
  ap.batch = call.batch;
  ap.heads_kv = call.heads_kv;
  ap.n_new = call.n_new;
  ap.page_size = spec.paged ? call.cache.page_size : call.cache.capacity;   // a slot's row: slot / page_size, slot % page_size
  ap.table_stride = call.cache.table_stride;
  l.v_tokens = ap.x;
  l.grid = rt::Dim3{static_cast<unsigned>((call.n_new + 3) / 4), static_cast<unsigned>(call.heads_kv),
                    static_cast<unsigned>(call.batch)};
  if (call.init_k_mean) {
    l.mean = load_helper(gen::kv_smooth_kernel(spec, "mean"), [&] { return gen::render_kv_smooth(spec, "mean"); });
    KvSmoothParams& mp = l.mean_params;
    mp.x = ap.x;
    mp.num_slots = call.num_slots;
    mp.batch = call.batch;
    mp.heads = mp.heads_kv = call.heads_kv;
    mp.rows = call.n_new;
  }
  return l;
}

void Runtime::Impl::append_kv(const AppendKvCall& call, void* stream) {
  check_append(call);
  // CUDA graphs: the append kernel is loaded by the first, eager call on the stream (a capture cannot).
  const Spec spec = resolve(call.spec);
  EagerKey key = eager_key(spec, Problem{call.batch, call.heads_kv, call.heads_kv, call.n_new, call.n_new}, stream);
  key.call[5] = call.init_k_mean;   // the mean's kernel
  const bool capturing = check_capture(key, stream, [&] {
    return "append_kv(" + to_string(spec) + ", batch " + std::to_string(call.batch) + ", n_new " + std::to_string(call.n_new) + ")";
  });
  rt::AppendLaunch l = make_append_launch(call);
  rt::bind_append_run(l, rt::run_of(call), "append_kv");
  rt::enqueue_append(l, static_cast<CUstream>(stream));
  std::lock_guard<std::mutex> lock(workspace_mutex);
  note_call(key, stream, capturing);
}

void Runtime::append_kv(const AppendKvCall& call, void* stream) { impl_->append_kv(call, stream); }

}  // namespace qattn

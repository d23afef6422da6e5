// Decode over a KV cache (include/qattn/decode.hpp): checks the call, picks the tiling and the split
// count, launches the split-K kernel and (with more than one split) the combine kernel; appends new
// tokens into a cache. The split partials live in a per-stream workspace of the runtime.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "qattn/decode/decode_shape.h"
#include "qattn/error.hpp"
#include "qattn/render.hpp"
#include "qattn/search_space.hpp"
#include "runtime/runtime_impl.hpp"

namespace qattn {
namespace {

constexpr long long kAlign = 16;   // the kernels copy 16-byte units

bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kAlign == 0; }

// The caches' strides with the defaults filled in (bytes).
struct CacheGeometry {
  long long row = 0, head_stride = 0, page_stride = 0;
  int tokens = 0;   // tokens a sequence can hold
};

CacheGeometry geometry(const Spec& spec, const KvCacheView& c, int heads_kv) {
  CacheGeometry g;
  g.row = kv_row_bytes(spec);
  const int rows_per_block = spec.paged ? c.page_size : c.capacity;
  g.head_stride = c.head_stride ? c.head_stride : rows_per_block * g.row;
  g.page_stride = c.page_stride ? c.page_stride : heads_kv * g.head_stride;
  g.tokens = spec.paged ? c.page_size * c.table_stride : c.capacity;
  return g;
}

void check_cache(const Spec& spec, const KvCacheView& c, int heads_kv, int tokens_needed, const char* what) {
  if (!c.k || !c.v) throw_bad_input(std::string(what) + ": the KV cache pointers are null; pass device pointers for cache.k and cache.v");
  if (spec.paged) {
    if (!c.block_table || c.table_stride < 1 || c.page_size < 4 || c.page_size % 4 != 0)
      throw_bad_input(std::string(what) + ": a paged cache needs block_table, table_stride >= 1 and page_size a positive multiple of 4 (got page_size " +
                      std::to_string(c.page_size) + ", table_stride " + std::to_string(c.table_stride) + ")");
  } else if (c.capacity < 1 || c.capacity % 4 != 0) {
    throw_bad_input(std::string(what) + ": a contiguous cache needs capacity a positive multiple of 4 tokens (got " +
                    std::to_string(c.capacity) + "); the spec's 'paged' token selects a paged cache");
  }
  const CacheGeometry g = geometry(spec, c, heads_kv);
  if (!aligned(c.k) || !aligned(c.v) || g.head_stride % kAlign || g.page_stride % kAlign)
    throw_bad_input(std::string(what) + ": cache pointers and strides must be multiples of 16 bytes (head_stride " +
                    std::to_string(g.head_stride) + ", page_stride " + std::to_string(g.page_stride) + ")");
  const long long rows_per_block = spec.paged ? c.page_size : c.capacity;
  if (g.head_stride < rows_per_block * g.row || g.page_stride < heads_kv * g.head_stride)
    throw_bad_input(std::string(what) + ": cache strides overlap (head_stride " + std::to_string(g.head_stride) +
                    " < tokens x row bytes, or page_stride < heads_kv x head_stride)");
  if (tokens_needed > g.tokens)
    throw_bad_input(std::string(what) + ": " + std::to_string(tokens_needed) + " tokens do not fit a cache of " +
                    std::to_string(g.tokens) + " tokens per sequence");
}

KvCacheRef cache_ref(void* data, const CacheGeometry& g) {
  return KvCacheRef{static_cast<unsigned char*>(data), g.page_stride, g.head_stride};
}

TensorRef dense_ref(void* data, long long sb, long long sh, long long ss, int heads, int seq, int d) {
  if (sb == 0 && sh == 0 && ss == 0) {
    ss = d;
    sh = static_cast<long long>(seq) * d;
    sb = heads * sh;
  }
  return TensorRef{data, sb, sh, ss, 1};
}

int rows_per_kv_head(const Spec& spec, const Problem& p) { return spec.gqa * p.q_len; }

Tiling decode_tiling(const Spec& spec, const DecodeCall& call, const DeviceLimits& limits) {
  if (call.tiling.block_m != 0) {
    require(validate(spec, call.tiling, limits));
    return call.tiling;
  }
  const int want_bm = rows_per_kv_head(spec, call.problem) <= 16 ? 16 : 32;
  const std::vector<Tiling> c = candidate_tilings(spec, limits);
  for (const Tiling& t : c)
    if (t.block_m == want_bm) return t;
  if (c.empty()) throw Error(ErrorKind::failure, "no decode tiling fits " + to_string(spec) + " within the device limits");
  return c.front();
}

// CTAs of a decode launch that can be resident at once: the tiling's shared memory, threads and the
// compiled kernel's registers (allocated per warp in units of 256) each bound the blocks per SM.
int resident_ctas(const DeviceLimits& limits, int sm_count, int smem, int warps, int registers) {
  const int per_warp_regs = (registers * 32 + 255) / 256 * 256;
  const int by_regs = registers > 0 ? 65536 / (warps * per_warp_regs) : 64;
  const int by_smem = limits.smem_per_sm / (smem + limits.smem_reserved_per_block);
  const int by_threads = limits.max_threads_per_sm / (warps * 32);
  return sm_count * std::max(1, std::min({by_regs, by_smem, by_threads}));
}

// Measured on the H100 (int4, 32/8 heads): per-CTA fixed cost dominates short splits (b 1, 128k
// tokens: 256 splits 230 us, 32 splits 88 us; b 8, 4k tokens: 16 splits 50 us, 4 splits 33 us), and
// a last wave that is mostly empty doubles the time (old kernel, b 8, 128k: 5 splits over 1.2 waves).
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
struct Runtime::Impl::DecodePlan {
  Tiling tiling;
  std::shared_ptr<LoadedKernel> kernel;
  DecodeSplits splits;
};

Runtime::Impl::DecodePlan Runtime::Impl::plan_decode(const Spec& spec, const DecodeCall& call) {
  DecodePlan plan;
  const DeviceLimits lim = limits();
  plan.tiling = decode_tiling(spec, call, lim);
  plan.kernel = load(spec, plan.tiling);
  const Problem& p = call.problem;
  const long long units = static_cast<long long>(p.batch) * p.heads_kv *
                          ((rows_per_kv_head(spec, p) + plan.tiling.block_m - 1) / plan.tiling.block_m);
  const int capacity = resident_ctas(lim, device().sm_count, kernel_smem_bytes(spec, plan.tiling), plan.tiling.warps,
                                     plan.kernel->function().registers());
  const int requested = call.splits > 0 ? call.splits : spec.split_k;
  plan.splits = plan_decode_splits(requested, p.kv_len, plan.tiling.block_n, plan.tiling.warps, units, capacity);
  return plan;
}

int Runtime::decode_splits(const DecodeCall& call) {
  const Spec spec = resolve(call.spec);
  return impl_->plan_decode(spec, call).splits.splits;
}

void Runtime::decode(const DecodeCall& call, void* stream) {
  const Spec spec = resolve(call.spec);
  if (spec.phase != Phase::decode) throw_bad_input("decode() takes a decode spec (got '" + to_string(spec) + "'); use attention() for prefill");
  const Problem& p = call.problem;
  require(validate(spec, p));
  if (!call.q || !call.o || !call.kv_lens) throw_bad_input("decode: q, o and kv_lens must be device pointers (one is null)");
  check_cache(spec, call.cache, p.heads_kv, p.kv_len, "decode");
  if (call.splits < 0) throw_bad_input("decode: splits must be >= 0 (0: the runtime chooses)");

  const Runtime::Impl::DecodePlan dplan = impl_->plan_decode(spec, call);
  const Tiling& tiling = dplan.tiling;
  const DecodeSplits& plan = dplan.splits;
  const int d = spec.head_dim;
  const CacheGeometry g = geometry(spec, call.cache, p.heads_kv);
  DecodeParams dp{};
  dp.q = dense_ref(call.q, call.q_sb, call.q_sh, call.q_ss, p.heads_q, p.q_len, d);
  dp.o = dense_ref(call.o, call.o_sb, call.o_sh, call.o_ss, p.heads_q, p.q_len, d);
  dp.k = cache_ref(call.cache.k, g);
  dp.v = cache_ref(call.cache.v, g);
  dp.block_table = spec.paged ? call.cache.block_table : nullptr;
  dp.kv_lens = call.kv_lens;
  dp.lse = call.lse;
  dp.batch = p.batch;
  dp.heads_q = p.heads_q;
  dp.heads_kv = p.heads_kv;
  dp.q_len = p.q_len;
  dp.page_size = call.cache.page_size;
  dp.table_stride = call.cache.table_stride;
  dp.splits = plan.splits;
  dp.split_tokens = plan.split_tokens;
  dp.softmax_scale = call.softmax_scale > 0 ? call.softmax_scale : static_cast<float>(1.0 / std::sqrt(double(d)));

  const auto& kernel = dplan.kernel;
  auto combine = plan.splits > 1 ? impl_->load_source(render_decode_combine(spec)) : nullptr;
  const CUstream cu_stream = static_cast<CUstream>(stream);
  std::lock_guard<std::mutex> lock(impl_->workspace_mutex);
  if (plan.splits > 1) {
    // Partials: O [rows][splits][d] then the log2-sums [rows][splits], fp32.
    const size_t rows = static_cast<size_t>(p.batch) * p.heads_q * p.q_len;
    const size_t floats = rows * plan.splits * (d + 1);
    rt::DeviceBuffer& ws = impl_->decode_workspaces[stream];
    if (ws.size() < floats * sizeof(float)) ws = rt::DeviceBuffer(floats * sizeof(float), impl_->options.device);
    dp.part_o = ws.as<float>();
    dp.part_lse = dp.part_o + rows * plan.splits * d;
  }
  const LaunchShape l = decode_launch(spec, tiling, p, plan.splits);
  kernel->function().launch(rt::Dim3{l.grid[0], l.grid[1], l.grid[2]}, rt::Dim3{l.block, 1, 1}, l.smem_bytes,
                            cu_stream, dp);
  if (combine) {
    DecodeCombineParams cp{};
    cp.o = dp.o;
    cp.part_o = dp.part_o;
    cp.part_lse = dp.part_lse;
    cp.lse = dp.lse;
    cp.kv_lens = dp.kv_lens;
    cp.batch = p.batch;
    cp.heads_q = p.heads_q;
    cp.q_len = p.q_len;
    cp.splits = plan.splits;
    cp.split_tokens = plan.split_tokens;
    const long long rows = static_cast<long long>(p.batch) * p.heads_q * p.q_len;
    combine->launch(rt::Dim3{static_cast<unsigned>((rows + 3) / 4), 1, 1}, rt::Dim3{128, 1, 1}, 0, cu_stream, cp);
  }
}

void Runtime::append_kv(const AppendKvCall& call, void* stream) {
  const Spec spec = resolve(call.spec);
  if (spec.phase != Phase::decode) throw_bad_input("append_kv() takes a decode spec (got '" + to_string(spec) + "')");
  if (call.batch < 1 || call.heads_kv < 1 || call.n_new < 1)
    throw_bad_input("append_kv: batch, heads_kv and n_new must be >= 1");
  if (!call.k || !call.v || !call.start) throw_bad_input("append_kv: k, v and start must be device pointers (one is null)");
  // Positions are on the device; the caller guarantees start[b] + n_new fits (checked here for the
  // first token only through the cache size).
  check_cache(spec, call.cache, call.heads_kv, call.n_new, "append_kv");
  const CacheGeometry g = geometry(spec, call.cache, call.heads_kv);
  auto fn = impl_->load_source(render_kv_append(spec));
  KvAppendParams ap{};
  ap.block_table = spec.paged ? call.cache.block_table : nullptr;
  ap.start = call.start;
  ap.batch = call.batch;
  ap.heads_kv = call.heads_kv;
  ap.n_new = call.n_new;
  ap.page_size = call.cache.page_size;
  ap.table_stride = call.cache.table_stride;
  const rt::Dim3 grid{static_cast<unsigned>((call.n_new + 3) / 4), static_cast<unsigned>(call.heads_kv),
                      static_cast<unsigned>(call.batch)};
  const CUstream cu_stream = static_cast<CUstream>(stream);
  for (int which = 0; which < 2; ++which) {
    const void* x = which == 0 ? call.k : call.v;
    ap.x = dense_ref(const_cast<void*>(x), call.sb, call.sh, call.ss, call.heads_kv, call.n_new, spec.head_dim);
    ap.cache = cache_ref(which == 0 ? call.cache.k : call.cache.v, g);
    fn->launch(grid, rt::Dim3{128, 1, 1}, 0, cu_stream, ap);
  }
}

}  // namespace qattn

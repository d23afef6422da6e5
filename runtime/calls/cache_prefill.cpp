// Prefill over a KV cache (AttentionCall::kv_cache): each sequence's first kv_lens[b] cache rows are read
// back (kv_gather.cuh) into a packed 16-bit K and V with their offsets, and the variable-length attention
// runs on them. Every row format of the cache works this way and the prefill spec's own formats apply;
// the dequantized rows are quantized again by the prefill's passes.
#include <string>

#include "generator/render_helpers.hpp"
#include "qattn/error.hpp"
#include "qattn/validate.hpp"
#include "runtime/calls/cache_gather.hpp"
#include "runtime/registry/runtime_impl.hpp"

namespace qattn {

namespace {

constexpr size_t kGatherAlign = 256;

size_t align_up(size_t n) { return (n + kGatherAlign - 1) / kGatherAlign * kGatherAlign; }

}  // namespace

namespace rt {

void check_cache_source(const AttentionCall& call) {
  const KvSource& src = *call.kv_cache;
  const Problem& p = call.problem;
  if (!call.cu_seqlens_q)
    throw_bad_input("attention over a KV cache takes packed queries: cu_seqlens_q (device int [batch + 1]) with q and o "
                    "[total_q, heads_q, d]");
  if (call.cu_seqlens_kv)
    throw_bad_input("attention over a KV cache reads each sequence's key count from kv_cache->kv_lens; leave "
                    "cu_seqlens_kv null");
  if (!src.kv_lens) throw_bad_input("attention over a KV cache needs kv_cache->kv_lens (device int [batch])");
  if (src.spec.phase != Phase::decode)
    throw_bad_input("kv_cache->spec describes the cache as a decode spec (its row format, d=, paged), got '" +
                    to_string(src.spec) + "'");
  if (src.spec.qk.fmt == Fmt::flashq)
    throw_bad_input("attention over a flashq cache is not supported; accepted caches: fp16, bf16, int8:per_token, "
                    "int4:per_token, int4:per_group, fp8e4m3:per_head");
  if (src.spec.head_dim != call.spec.head_dim || src.spec.out != call.spec.out)
    throw_bad_input("the cache spec '" + to_string(src.spec) + "' and the prefill spec '" + to_string(call.spec) +
                    "' must have the same d= and out=");
  if (p.batch < 1 || p.heads_kv < 1 || p.kv_len < 1)
    throw_bad_input("attention over a KV cache: problem.batch, heads_kv and kv_len (a bound on every kv_lens entry) "
                    "must be >= 1, got " + to_string(p));
  require(validate(src.spec));
  check_cache(src.spec, src.view, p.heads_kv, 1, "attention over a KV cache");
}

void CacheGather::enqueue(const KvSource& src, char* base, void* stream, const char* what) const {
  const KvCacheView& v = src.view;
  if (!v.k || !v.v || !src.kv_lens || (cache_spec.paged && !v.block_table) ||
      (cache_spec.qk.fmt == Fmt::fp8e4m3 && (!v.k_head_scale || !v.v_head_scale)))
    throw_bad_input(std::string(what) + ": the cache's k, v and kv_lens (and block_table when paged, the head scales for "
                    "fp8e4m3:per_head) must be device pointers (one is null)");
  if (!aligned(v.k) || !aligned(v.v)) throw_bad_input(std::string(what) + ": the cache's k and v must be 16-byte aligned");
  KvGatherParams gp = params;
  gp.block_table = cache_spec.paged ? v.block_table : nullptr;
  gp.kv_lens = src.kv_lens;
  int* cu = reinterpret_cast<int*>(base + 2 * tensor_bytes);
  for (int which = 0; which < 2; ++which) {
    gp.cache = cache_ref(which == 0 ? v.k : v.v, geometry);
    gp.head_scale = which == 0 ? v.k_head_scale : v.v_head_scale;
    gp.out = base + which * tensor_bytes;
    gp.cu_seqlens = which == 0 ? cu : nullptr;
    gp.k_mean = which == 0 ? v.k_mean : nullptr;   // a K-smoothed cache: the true keys
    kernel->launch(grid, Dim3{128, 1, 1}, 0, static_cast<CUstream>(stream), gp);
  }
}

AttentionCall CacheGather::dense_call(const AttentionCall& call, char* base) const {
  AttentionCall dense = call;
  dense.kv_cache = nullptr;
  dense.k = packed(base, heads_kv, head_dim);
  dense.v = packed(base + tensor_bytes, heads_kv, head_dim);
  dense.cu_seqlens_kv = reinterpret_cast<int*>(base + 2 * tensor_bytes);
  return dense;
}

}  // namespace rt

rt::CacheGather Runtime::Impl::make_gather(const AttentionCall& call, bool checked) {
  if (!checked) rt::check_cache_source(call);
  const KvSource& src = *call.kv_cache;
  const Problem& p = call.problem;
  rt::CacheGather g;
  g.cache_spec = resolve(src.spec);
  g.kernel = load_helper(gen::kv_row_kernel(KernelFamily::kv_gather, g.cache_spec),
                         [&] { return gen::render_kv_gather(g.cache_spec); });
  g.heads_kv = p.heads_kv;
  g.head_dim = g.cache_spec.head_dim;
  g.tensor_bytes = align_up(static_cast<size_t>(p.batch) * p.kv_len * p.heads_kv * g.head_dim * 2);
  g.bytes = 2 * g.tensor_bytes + sizeof(int) * static_cast<size_t>(p.batch + 1);
  g.geometry = rt::geometry(g.cache_spec, src.view, p.heads_kv);
  KvGatherParams& gp = g.params;
  gp.batch = p.batch;
  gp.heads_kv = p.heads_kv;
  gp.max_len = p.kv_len;
  gp.page_size = src.view.page_size;
  gp.table_stride = src.view.table_stride;
  g.grid = rt::Dim3{static_cast<unsigned>((p.kv_len + 3) / 4), static_cast<unsigned>(p.heads_kv),
                    static_cast<unsigned>(p.batch)};
  return g;
}

AttentionCall Runtime::Impl::gather_kv(const AttentionCall& call, void* stream) {
  rt::check_cache_source(call);
  // CUDA graphs: the gather kernel is loaded and the workspace sized by the first, eager call.
  const Spec cache_spec = resolve(call.kv_cache->spec);
  EagerKey key = eager_key(cache_spec, call.problem, stream);
  key.call[0] = 1;   // the gather, apart from a decode call of the same spec and shape
  const bool capturing = check_capture(key, stream, [&] {
    return "attention over the cache '" + to_string(cache_spec) + "' (" + to_string(call.problem) + ")";
  });
  const rt::CacheGather g = make_gather(call, /*checked=*/true);
  std::lock_guard<std::mutex> lock(workspace_mutex);
  char* base = stream_workspace(gather_workspaces[stream], g.bytes, stream, "attention over a KV cache").as<char>();
  g.enqueue(*call.kv_cache, base, stream, "attention over a KV cache");
  note_call(key, stream, capturing);
  return g.dense_call(call, base);
}

}  // namespace qattn

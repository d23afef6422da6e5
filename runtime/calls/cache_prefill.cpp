// Prefill over a KV cache (AttentionCall::kv_cache): each sequence's first kv_lens[b] cache rows are read
// back (kv_gather.cuh) into a packed 16-bit K and V with their offsets, in a per-stream workspace, and
// the variable-length attention runs on them. Every row format of the cache works this way and the
// prefill spec's own formats apply; the dequantized rows are quantized again by the prefill's passes.
#include <string>

#include "generator/render_helpers.hpp"
#include "qattn/error.hpp"
#include "qattn/validate.hpp"
#include "runtime/calls/kv_cache_view.hpp"
#include "runtime/registry/runtime_impl.hpp"

namespace qattn {

namespace {

constexpr size_t kGatherAlign = 256;

size_t align_up(size_t n) { return (n + kGatherAlign - 1) / kGatherAlign * kGatherAlign; }

void check_source(const AttentionCall& call) {
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
  rt::check_cache(src.spec, src.view, p.heads_kv, 1, "attention over a KV cache");
}

}  // namespace

AttentionCall Runtime::Impl::gather_kv(const AttentionCall& call, void* stream) {
  check_source(call);
  const KvSource& src = *call.kv_cache;
  const Problem& p = call.problem;
  const Spec cache_spec = resolve(src.spec);
  // CUDA graphs: the gather kernel is loaded and the workspace sized by the first, eager call.
  EagerKey key = eager_key(cache_spec, p, stream);
  key.call[0] = 1;   // the gather, apart from a decode call of the same spec and shape
  const bool capturing = check_capture(key, stream, [&] {
    return "attention over the cache '" + to_string(cache_spec) + "' (" + to_string(p) + ")";
  });
  auto fn = load_helper(gen::kv_row_kernel(KernelFamily::kv_gather, cache_spec), [&] { return gen::render_kv_gather(cache_spec); });

  const int d = cache_spec.head_dim;
  const size_t tensor_bytes = align_up(static_cast<size_t>(p.batch) * p.kv_len * p.heads_kv * d * 2);
  const size_t bytes = 2 * tensor_bytes + sizeof(int) * static_cast<size_t>(p.batch + 1);
  std::lock_guard<std::mutex> lock(workspace_mutex);
  char* base = stream_workspace(gather_workspaces[stream], bytes, stream, "attention over a KV cache").as<char>();
  int* cu = reinterpret_cast<int*>(base + 2 * tensor_bytes);
  const rt::CacheGeometry g = rt::geometry(cache_spec, src.view, p.heads_kv);
  KvGatherParams gp{};
  gp.block_table = cache_spec.paged ? src.view.block_table : nullptr;
  gp.kv_lens = src.kv_lens;
  gp.batch = p.batch;
  gp.heads_kv = p.heads_kv;
  gp.max_len = p.kv_len;
  gp.page_size = src.view.page_size;
  gp.table_stride = src.view.table_stride;
  const rt::Dim3 grid{static_cast<unsigned>((p.kv_len + 3) / 4), static_cast<unsigned>(p.heads_kv),
                      static_cast<unsigned>(p.batch)};
  for (int which = 0; which < 2; ++which) {
    gp.cache = rt::cache_ref(which == 0 ? src.view.k : src.view.v, g);
    gp.head_scale = which == 0 ? src.view.k_head_scale : src.view.v_head_scale;
    gp.out = base + which * tensor_bytes;
    gp.cu_seqlens = which == 0 ? cu : nullptr;
    fn->launch(grid, rt::Dim3{128, 1, 1}, 0, static_cast<CUstream>(stream), gp);
  }
  note_call(key, stream, capturing);

  AttentionCall dense = call;
  dense.kv_cache = nullptr;
  dense.k = packed(base, p.heads_kv, d);
  dense.v = packed(base + tensor_bytes, p.heads_kv, d);
  dense.cu_seqlens_kv = cu;
  return dense;
}

}  // namespace qattn

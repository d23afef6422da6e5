#include "runtime/calls/kv_cache_view.hpp"

#include <string>

#include "qattn/error.hpp"

namespace qattn::rt {

TensorRef dense_ref(void* data, long long sb, long long sh, long long ss, int heads, int seq, int d) {
  if (sb == 0 && sh == 0 && ss == 0) {
    ss = d;
    sh = static_cast<long long>(seq) * d;
    sb = heads * sh;
  }
  return TensorRef{data, sb, sh, ss, 1};
}

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
  if (spec.qk.fmt == Fmt::fp8e4m3 && (!c.k_head_scale || !c.v_head_scale))
    throw_bad_input(std::string(what) + ": an fp8e4m3:per_head cache needs k_head_scale and v_head_scale (device fp32 [heads_kv]; max|x| / 448 per head)");
  const bool quantized_k = spec.qk.fmt == Fmt::int8 || spec.qk.fmt == Fmt::int4 || spec.qk.fmt == Fmt::fp8e4m3;
  if (c.k_mean && !quantized_k)
    throw_bad_input(std::string(what) + ": k_mean (K smoothing) applies to a quantized K cache (int8:per_token, int4:per_token, "
                    "int4:per_group, fp8e4m3:per_head); a " + to_string(spec.qk.fmt) + " cache stores K as given: leave k_mean null");
  if (c.k_mean && reinterpret_cast<std::uintptr_t>(c.k_mean) % alignof(float) != 0)
    throw_bad_input(std::string(what) + ": k_mean must be a 4-byte aligned device fp32 [heads_kv, d] buffer");
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

}  // namespace qattn::rt

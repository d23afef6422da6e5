// A KV cache as the calls that read or write it see it (KvCacheView, include/qattn/decode.hpp): the
// strides with their defaults filled in, the checks every such call makes before launching, and the
// kernel-side reference (kv_layout.h).
#pragma once
#include <cstdint>

#include "qattn/abi.h"
#include "qattn/decode.hpp"
#include "qattn/spec.hpp"

namespace qattn::rt {

constexpr long long kAlign = 16;   // the kernels copy 16-byte units

inline bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kAlign == 0; }

// The caches' strides with the defaults filled in (bytes).
struct CacheGeometry {
  long long row = 0, head_stride = 0, page_stride = 0;
  int tokens = 0;   // tokens a sequence can hold
};

CacheGeometry geometry(const Spec& spec, const KvCacheView& c, int heads_kv);

// Refuses (bad_input, naming `what`) a view the kernels cannot address: null pointers, a paged cache
// without its table, a contiguous one without capacity, missing fp8 scales, misalignment, overlapping
// strides, fewer than tokens_needed tokens per sequence, or a k_mean on a cache that stores K unquantized.
void check_cache(const Spec& spec, const KvCacheView& c, int heads_kv, int tokens_needed, const char* what);

// The tokens or queries a cache call reads or writes, [batch, heads, seq, d] at element strides sb, sh,
// ss (all 0: contiguous).
TensorRef dense_ref(void* data, long long sb, long long sh, long long ss, int heads, int seq, int d);

// A cache view's device pointers into a run's fields of the same names (DecodeRun, AppendRun).
template <class Run>
void take_cache_pointers(Run& r, const KvCacheView& c) {
  r.k_cache = c.k;
  r.v_cache = c.v;
  r.block_table = c.block_table;
  r.k_head_scale = c.k_head_scale;
  r.v_head_scale = c.v_head_scale;
  r.k_mean = c.k_mean;
}

inline KvCacheRef cache_ref(void* data, const CacheGeometry& g) {
  return KvCacheRef{static_cast<unsigned char*>(data), g.page_stride, g.head_stride};
}

}  // namespace qattn::rt

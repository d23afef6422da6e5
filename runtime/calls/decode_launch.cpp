#include "runtime/calls/decode_launch.hpp"

#include <cmath>
#include <string>

#include "qattn/error.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/registry/runtime_impl.hpp"

namespace qattn::rt {

size_t DecodeLaunch::partial_bytes() const {
  // O [rows][slots][d] then the log2-sums [rows][slots], fp32.
  return slots > 1 ? static_cast<size_t>(rows) * slots * (spec.head_dim + 1) * sizeof(float) : 0;
}

size_t DecodeLaunch::flag_bytes() const { return unified_max ? static_cast<size_t>(rows) * sizeof(int) : 0; }

DecodeRun run_of(const DecodeCall& call) {
  DecodeRun r;
  r.q = call.q;
  r.o = call.o;
  r.lse = call.lse;
  const bool flashq = call.spec.qk.fmt == Fmt::flashq;
  if (flashq) {
    const FlashQCacheView& c = call.flashq;
    r.block_table = c.block_table;
    r.k_blocks = c.k_blocks;
    r.v_blocks = c.v_blocks;
    r.k_buffer = c.k_buffer;
    r.v_buffer = c.v_buffer;
    r.flashq_heads = c.heads;
    r.compressed_lens = c.compressed_lens;
    r.buffer_lens = c.buffer_lens;
  } else {
    take_cache_pointers(r, call.cache);
    r.kv_lens = call.kv_lens;
  }
  r.row_flags = call.row_flags;
  r.softmax_scale = call.softmax_scale;
  return r;
}

namespace {

void require_pointers(bool ok, const char* what, const char* names) {
  if (!ok) throw_bad_input(std::string(what) + ": " + names + " must be device pointers (one is null)");
}

void require_aligned(bool ok, const char* what, const char* names) {
  if (!ok) throw_bad_input(std::string(what) + ": " + names + " must be 16-byte aligned");
}

}  // namespace

void bind_decode_run(DecodeLaunch& l, const DecodeRun& r, const char* what) {
  const Spec& spec = l.spec;
  const bool flashq = spec.qk.fmt == Fmt::flashq;
  require_pointers(r.q && r.o, what, "q and o");
  if (flashq) {
    require_pointers(r.k_blocks && r.v_blocks && r.k_buffer && r.v_buffer && r.flashq_heads && r.compressed_lens &&
                         r.buffer_lens && (!spec.paged || r.block_table),
                     what, "a flashq cache's k_blocks, v_blocks, k_buffer, v_buffer, heads, compressed_lens, buffer_lens (and "
                           "block_table when paged)");
    require_aligned(aligned(r.k_blocks) && aligned(r.v_blocks) && aligned(r.k_buffer) && aligned(r.v_buffer), what,
                    "flashq blocks and buffers");
  } else {
    const bool per_head = spec.qk.gran == Gran::per_head;
    require_pointers(r.k_cache && r.v_cache && r.kv_lens && (!spec.paged || r.block_table) &&
                         (!per_head || (r.k_head_scale && r.v_head_scale)),
                     what, "k_cache, v_cache, kv_lens (and block_table when paged, the head scales for fp8e4m3:per_head)");
    require_aligned(aligned(r.k_cache) && aligned(r.v_cache), what, "k_cache and v_cache");
  }
  const float scale = r.softmax_scale > 0 ? r.softmax_scale : static_cast<float>(1.0 / std::sqrt(double(spec.head_dim)));
  for (DecodePart& part : l.parts) {
    DecodeParams& dp = part.dp;
    dp.q.ptr = const_cast<void*>(r.q);
    dp.o.ptr = r.o;
    dp.lse = r.lse;
    dp.softmax_scale = scale;
    if (!flashq) {
      dp.k = cache_ref(r.k_cache, l.geometry);
      dp.v = cache_ref(r.v_cache, l.geometry);
      dp.block_table = spec.paged ? r.block_table : nullptr;
      dp.kv_lens = r.kv_lens;
      dp.k_head_scale = r.k_head_scale;
      dp.v_head_scale = r.v_head_scale;
    } else if (part.flashq_buffer) {
      dp.k = KvCacheRef{static_cast<unsigned char*>(r.k_buffer), l.fq_buffer_page, l.fq_buffer_head};
      dp.v = KvCacheRef{static_cast<unsigned char*>(r.v_buffer), l.fq_buffer_page, l.fq_buffer_head};
      dp.kv_lens = r.buffer_lens;
    } else {
      dp.k = KvCacheRef{static_cast<unsigned char*>(r.k_blocks), l.fq_page[0], 0};
      dp.v = KvCacheRef{static_cast<unsigned char*>(r.v_blocks), l.fq_page[1], 0};
      dp.block_table = spec.paged ? r.block_table : nullptr;
      dp.kv_lens = r.compressed_lens;
      dp.fq_heads = r.flashq_heads;
    }
  }
  DecodeCombineParams& cp = l.combine_params;
  cp.o = l.parts.front().dp.o;
  cp.lse = r.lse;
  cp.kv_lens = flashq ? r.compressed_lens : r.kv_lens;
  if (l.lse_fix && !r.k_mean)
    throw_bad_input(std::string(what) + ": made for a K-smoothed cache (k_mean set), so every run needs its k_mean");
  if (!l.lse_fix && r.k_mean)
    throw_bad_input(std::string(what) + ": made for a cache without K smoothing; a run cannot add k_mean (make the plan with "
                    "cache.k_mean set)");
  if (l.lse_fix) {
    KvSmoothParams& fp = l.lse_fix_params;
    fp.x.ptr = const_cast<void*>(r.q);
    fp.mean = const_cast<float*>(r.k_mean);
    fp.lse = r.lse;
    fp.softmax_scale = scale;
  }
}

void enqueue_decode(DecodeLaunch& l, float* partials, int* flags, CUstream stream) {
  for (DecodePart& part : l.parts) {
    part.dp.part_o = partials;
    part.dp.part_lse = partials ? partials + static_cast<size_t>(l.rows) * l.slots * l.spec.head_dim : nullptr;
    part.dp.row_flags = flags;
  }
  // The unified-max kernel ORs kUmOverflow / kUmSeen into zeroed flags; a disabled unified max leaves
  // them 0: every row took the exact path.
  if (l.unified_max) fill_bytes_async(reinterpret_cast<CUdeviceptr>(flags), 0, l.flag_bytes(), stream, l.device);
  auto launch = [&](const DecodePart& part, const LoadedKernel& kernel, const DecodeParams& dp) {
    kernel.function().launch(part.grid, part.block, part.smem_bytes, stream, dp);
  };
  for (const DecodePart& part : l.parts) launch(part, *part.kernel, part.dp);
  for (const DecodePart& part : l.parts)
    if (part.fallback) {   // on the flagged rows only
      DecodeParams fp = part.dp;
      fp.fallback_only = 1;
      launch(part, *part.fallback, fp);
    }
  if (l.combine) {
    DecodeCombineParams& cp = l.combine_params;
    cp.part_o = l.parts.front().dp.part_o;
    cp.part_lse = l.parts.front().dp.part_lse;
    l.combine->launch(Dim3{static_cast<unsigned>((l.rows + 3) / 4), 1, 1}, Dim3{128, 1, 1}, 0, stream, cp);
  }
  const KvSmoothParams& fp = l.lse_fix_params;
  if (l.lse_fix && fp.lse)
    l.lse_fix->launch(Dim3{static_cast<unsigned>((fp.rows + 3) / 4), static_cast<unsigned>(fp.heads),
                           static_cast<unsigned>(fp.batch)},
                      Dim3{128, 1, 1}, 0, stream, fp);
}

}  // namespace qattn::rt

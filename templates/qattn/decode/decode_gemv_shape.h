// Tilings of the CUDA-core (GEMV) decode kernel (decode_gemv.cuh), shared by the kernel and the host.
//
// Tiling fields, GEMV meaning:
//   bm      query rows per CTA: 1, 2, 4 or 8 (no padding; rows past the CTA's last row are skipped)
//   bn      tokens per warp chunk (one cp.async stage of K and V rows): 16, 32 or 64 (flashq: 64)
//   warps   1, 2, 4 or 8, each taking chunks of the CTA's split in turn, merged at the end
//   stages  2 .. 4 chunks in flight per warp
// Shared memory: the same per-warp pipeline of raw cache rows as the mma kernel, and the same merge area.
#pragma once
#include "qattn/decode/decode_shape.h"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define QATTN_GEMV_FN __host__ __device__ constexpr
#else
#define QATTN_GEMV_FN constexpr
#endif

namespace qattn::decode {

QATTN_GEMV_FN int gemv_smem_bytes(Fmt kv, Gran g, int d, int bm, int bn, int warps, int stages) {
  return smem_bytes(kv, g, d, bm, bn, warps, stages);
}

QATTN_GEMV_FN bool gemv_tiling_ok(Fmt kv, Gran g, int d, int bm, int bn, int warps, int stages) {
  return kv::format_ok(kv, g) && (d == 64 || d == 128 || d == 256) && (bm == 1 || bm == 2 || bm == 4 || bm == 8) &&
         (bn == 16 || bn == 32 || bn == 64) && (kv != Fmt::flashq || bn == kv::kFlashQBlock) &&
         (warps == 1 || warps == 2 || warps == 4 || warps == 8) && stages >= 2 && stages <= 4 &&
         gemv_smem_bytes(kv, g, d, bm, bn, warps, stages) <= kMaxSmemBytes;
}

}  // namespace qattn::decode

#undef QATTN_GEMV_FN

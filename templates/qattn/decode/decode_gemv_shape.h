// Tilings of the CUDA-core (GEMV) decode kernel (decode_gemv.cuh), shared by the kernel and the host.
//
// Tiling fields, GEMV meaning:
//   bm      query rows per CTA: 1, 2, 4 or 8 (no padding; rows past the CTA's last row are skipped)
//   bn      tokens per warp chunk (one cp.async stage of K and V rows): 16, 32 or 64
//   warps   1, 2, 4 or 8, each taking chunks of the CTA's split in turn, merged at the end
//   stages  2 .. 4 chunks in flight per warp
//
// The split of a warp: a token row is spread over `token lanes` lanes, each holding `lane channels`
// channels of it; the 32 / token-lanes groups of lanes take one token each per step. A lane keeps Q and
// O of every row for its channels in fp32 registers (2 x bm x lane channels), so the lane channels
// shrink as bm grows: 32 at bm 1, 16 at bm 2 and 4, 8 at bm 8 (64 or 128 array registers).
// A lane reads its channels of a row in `units` of 16, 8 or 4 bytes, unit k of the lane being unit
// lane + k * token-lanes of the row's codes (consecutive lanes read consecutive bytes).
//
// Shared memory: the same per-warp pipeline of raw cache rows as the mma kernel; the final merge treats
// every group of lanes of every warp as its own softmax state (bm x (d + 3) floats each).
#pragma once
#include "qattn/decode/decode_shape.h"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define QATTN_GEMV_FN __host__ __device__ constexpr
#else
#define QATTN_GEMV_FN constexpr
#endif

namespace qattn::decode {

QATTN_GEMV_FN int gemv_lane_channels(int bm) { return bm == 1 ? 32 : bm <= 4 ? 16 : 8; }
QATTN_GEMV_FN int gemv_token_lanes(int d, int bm) { return d / gemv_lane_channels(bm); }
QATTN_GEMV_FN int gemv_step_tokens(int d, int bm) { return 32 / gemv_token_lanes(d, bm); }

// Bits of one cache element (the codes after the row header).
QATTN_GEMV_FN int gemv_element_bits(Fmt kv) {
  return kv == Fmt::int4 ? 4 : (kv == Fmt::int8 || kv == Fmt::fp8e4m3) ? 8 : 16;
}

// Bytes of one unit: the widest of 16, 8, 4 that divides the row and the header (every row's codes
// start aligned), no wider than a lane's channels, and for int4 per_group within one group's codes.
QATTN_GEMV_FN int gemv_unit_bytes(Fmt kv, Gran g, int d, int bm) {
  const int row = kv::row_bytes(kv, g, d), hdr = kv::header_bytes(kv, g);
  const int lane_bytes = gemv_lane_channels(bm) * gemv_element_bits(kv) / 8;
  int u = kv == Fmt::fp16 || kv == Fmt::bf16 ? 8 : 16;   // fp16/bf16: 4 channels a unit (registers)
  while (u > 4 && (row % u != 0 || hdr % u != 0)) u /= 2;
  if (u > lane_bytes) u = lane_bytes;
  const int group_bytes = d / kv::groups(kv, g) * gemv_element_bits(kv) / 8;
  return u < group_bytes ? u : group_bytes;
}

QATTN_GEMV_FN int gemv_merge_bytes(int d, int bm, int warps) {
  return warps * gemv_step_tokens(d, bm) * bm * (d + 3) * 4;
}

// flashq: the pipeline is followed by each warp's (s, m) float tables of its K and V block.
QATTN_GEMV_FN int gemv_smem_bytes(Fmt kv, Gran g, int d, int bm, int bn, int warps, int stages) {
  const int a = pipeline_bytes(kv, g, d, bn, warps, stages) + (kv == Fmt::flashq ? warps * 4 * d * 4 : 0);
  const int b = gemv_merge_bytes(d, bm, warps);
  return a > b ? a : b;
}

// flashq: a chunk is one 64-token block (bn 64).
QATTN_GEMV_FN bool gemv_tiling_ok(Fmt kv, Gran g, int d, int bm, int bn, int warps, int stages) {
  return kv::format_ok(kv, g) && (kv != Fmt::flashq || bn == kv::kFlashQBlock) && (d == 64 || d == 128 || d == 256) &&
         (bm == 1 || bm == 2 || bm == 4 || bm == 8) && (bn == 16 || bn == 32 || bn == 64) &&
         bn >= gemv_step_tokens(d, bm) && (warps == 1 || warps == 2 || warps == 4 || warps == 8) && stages >= 2 &&
         stages <= 4 && gemv_smem_bytes(kv, g, d, bm, bn, warps, stages) <= kMaxSmemBytes;
}

}  // namespace qattn::decode

#undef QATTN_GEMV_FN

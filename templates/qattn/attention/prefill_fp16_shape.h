// Shape rules of the FP16/BF16 FlashAttention-2 prefill kernel (prefill_fp16.cuh), in plain C++ so
// that the host (generator, tuner) and the device code share one definition.
//
// Tiling parameters: D (head dim), BM (query rows per CTA), BN (keys per KV tile), WARPS, STAGES.
// Valid tilings, and why:
//   * D in {64, 96, 128, 256}: a K/V/Q row is D/8 16-byte chunks. The XOR swizzle (common/swizzle.cuh)
//     spans 8 chunks for rows of a multiple of 8 chunks, and 4 chunks for the 12 of d = 96, whose rows
//     then need no padding: consecutive 192-byte rows already start half the banks apart.
//   * BM = WARPS * 16 * MT with MT (m16 tiles per warp) in {1, 2}: FlashAttention-2 split, each
//     warp owns MT*16 whole query rows, so softmax needs no inter-warp reduction. MT = 2 reuses
//     every K/V fragment read from shared memory for two products, which H100 needs: with MT = 1
//     the ldmatrix traffic alone is about 1.2x the shared-memory bandwidth at mma.sync peak.
//   * BN in {32, 64, 128}: a multiple of 16 (the k of the P*V product).
//   * WARPS in {1, 2, 4, 8}; STAGES in {1, 2, 3}: STAGES = 1 is the FlashAttention-2 schedule
//     (one K and one V buffer: V(j) loads during Q*K(j)^T, K(j+1) during P*V(j)); STAGES = s keeps
//     s K and s V buffers and loads s-1 tiles further ahead.
//   * Register budget: the fp32 O accumulator (MT*D/2 per thread) plus the score tile (MT*BN/2)
//     must stay <= 192 registers, or ptxas spills under the 255-register cap. At d = 256 this leaves
//     MT = 1 only (O alone is 128 registers), so BM = 16 * WARPS.
//   * Each cp.async pass covers whole rows, WARPS*32 / gcd(WARPS*32, D/8) of them (D/8 divides the
//     threads except at d = 96, where each thread loads 3 chunks per pass of 32 rows per 4 warps):
//     BN and BM must be multiples of it (d = 96 with 8 warps: 64 rows, so BN = 32 is out).
//   * Dynamic shared memory (Q tile + STAGES K and V tiles) <= 227 KiB, the sm_90 opt-in maximum.
//     The host must still compare smem_bytes() with its device's limit (sm_80: 163 KiB, sm_86 and
//     sm_89: 99 KiB) and raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES above 48 KiB.
// Runtime requirements (checked by the host, not here): tensor pointers 16-byte aligned, sc == 1 and
// sb, sh, ss multiples of 8 elements (every row is loaded and stored as 16-byte vectors);
// heads_q % heads_kv == 0; softmax_scale > 0 (the running max is kept on unscaled scores).
#pragma once

#if !defined(QATTN_HOST_DEVICE)
#if defined(__CUDACC__)
#define QATTN_HOST_DEVICE __host__ __device__
#else
#define QATTN_HOST_DEVICE
#endif
#endif

namespace qattn::prefill_fp16 {

constexpr int kMaxSmemBytes = 227 * 1024;

// Dynamic shared memory of one CTA: the Q tile (reused to stage O) and STAGES K and V tiles.
QATTN_HOST_DEVICE constexpr int smem_bytes(int d, int bm, int bn, int stages, int elem_bytes) {
  return (bm * d + 2 * stages * bn * d) * elem_bytes;
}

QATTN_HOST_DEVICE constexpr int gcd(int a, int b) { return b == 0 ? a : gcd(b, a % b); }

// Rows of a tile one cp.async pass of the CTA covers (each thread loads D/8 / gcd(threads, D/8) chunks).
QATTN_HOST_DEVICE constexpr int rows_per_pass(int d, int warps) { return warps * 32 / gcd(warps * 32, d / 8); }

QATTN_HOST_DEVICE constexpr bool tiling_ok(int d, int bm, int bn, int warps, int stages) {
  if (d != 64 && d != 96 && d != 128 && d != 256) return false;
  if (warps != 1 && warps != 2 && warps != 4 && warps != 8) return false;
  if (stages < 1 || stages > 3) return false;
  if (bn != 32 && bn != 64 && bn != 128) return false;
  const int rows_per_warp = bm / warps;
  if (bm % warps != 0 || (rows_per_warp != 16 && rows_per_warp != 32)) return false;
  const int m_tiles = rows_per_warp / 16;
  if (m_tiles * d / 2 + m_tiles * bn / 2 > 192) return false;
  const int pass_rows = rows_per_pass(d, warps);
  if (bn % pass_rows != 0 || bm % pass_rows != 0) return false;
  return smem_bytes(d, bm, bn, stages, 2) <= kMaxSmemBytes;
}

// A tiling of the kernel (the template arguments other than IO, D and CAUSAL).
struct Tiling {
  int bm, bn, warps, stages;
};

// Tuning candidates per head dim, fastest first on H100 SXM (fp16, B*N = 16k tokens, hidden 2048,
// N = 1k..16k, causal and not). All but the 8-warp one fit the 99 KiB
// of sm_86 / sm_89. Host-only: NVRTC never needs these lists.
#if !defined(__CUDACC_RTC__)
inline constexpr Tiling kTilingsD64[] = {{128, 128, 4, 1}, {128, 128, 4, 2}, {128, 64, 4, 1}, {64, 64, 4, 2}, {64, 128, 4, 2}};
inline constexpr Tiling kTilingsD128[] = {{128, 64, 4, 1}, {128, 64, 4, 2}, {256, 64, 8, 2} /* 128 KiB */, {128, 32, 4, 2}, {64, 64, 4, 2}};
// d = 96 and 256: ordered by ptxas's report alone (not timed). d = 96 starts from the
// d = 128 favourite (254 registers, no spill on sm_80 / sm_89; 48 KiB leaves 2 CTAs per SM on sm_89);
// on sm_90 it spills 12 bytes (non-causal), so there search_space.cpp takes the 2-stage form first
// (253-255 registers, no spill; 72 KiB is no limit there). At d = 256
// the 128-register O leaves room for bn 32 only: bn 64 spills 4-24 bytes on sm_80 and sm_90a, bn 128
// 16-20 (still valid tilings, left out here); the 3-stage and 8-warp tilings (128 KiB) are for sm_80 / sm_90.
inline constexpr Tiling kTilingsD96[] = {{128, 64, 4, 1}, {128, 64, 4, 2}, {64, 128, 4, 1}, {128, 64, 8, 1}, {64, 64, 4, 2}, {64, 32, 4, 3}};
inline constexpr Tiling kTilingsD256[] = {{64, 32, 4, 2}, {64, 32, 4, 3}, {128, 32, 8, 2}, {64, 32, 4, 1}};
#endif

}  // namespace qattn::prefill_fp16

// Shape rules of the FP16/BF16 FlashAttention-2 prefill kernel (prefill_fp16.cuh), in plain C++ so
// that the host (generator, tuner) and the device code share one definition.
//
// Tiling parameters: D (head dim), BM (query rows per CTA), BN (keys per KV tile), WARPS, STAGES.
// Valid tilings, and why:
//   * D in {64, 128, 256}: a K/V/Q row is D/8 16-byte chunks, and the XOR swizzle needs a multiple
//     of 8 chunks (rows of 128-byte multiples); 96 would need a padded layout (not done yet).
//   * BM = WARPS * 16 * MT with MT (m16 tiles per warp) in {1, 2}: FlashAttention-2 split, each
//     warp owns MT*16 whole query rows, so softmax needs no inter-warp reduction. MT = 2 reuses
//     every K/V fragment read from shared memory for two products, which H100 needs: with MT = 1
//     the ldmatrix traffic alone is about 1.2x the shared-memory bandwidth at mma.sync peak.
//   * BN in {32, 64, 128}: a multiple of 16 (the k of the P*V product).
//   * WARPS in {1, 2, 4, 8}; STAGES in {1, 2, 3}: STAGES = 1 is the FlashAttention-2 schedule
//     (one K and one V buffer: V(j) loads during Q*K(j)^T, K(j+1) during P*V(j)); STAGES = s keeps
//     s K and s V buffers and loads s-1 tiles further ahead.
//   * Register budget: the fp32 O accumulator (MT*D/2 per thread) plus the score tile (MT*BN/2)
//     must stay <= 192 registers, or ptxas spills under the 255-register cap.
//   * Each cp.async pass covers whole rows: WARPS*32 must be a multiple of D/8 and BN a multiple of
//     the rows one pass covers (WARPS*32 / (D/8)); same for BM.
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

QATTN_HOST_DEVICE constexpr bool tiling_ok(int d, int bm, int bn, int warps, int stages) {
  if (d != 64 && d != 128 && d != 256) return false;
  if (warps != 1 && warps != 2 && warps != 4 && warps != 8) return false;
  if (stages < 1 || stages > 3) return false;
  if (bn != 32 && bn != 64 && bn != 128) return false;
  const int rows_per_warp = bm / warps;
  if (bm % warps != 0 || (rows_per_warp != 16 && rows_per_warp != 32)) return false;
  const int m_tiles = rows_per_warp / 16;
  if (m_tiles * d / 2 + m_tiles * bn / 2 > 192) return false;
  const int threads = warps * 32, chunks_per_row = d / 8;
  if (threads % chunks_per_row != 0) return false;
  const int rows_per_pass = threads / chunks_per_row;
  if (bn % rows_per_pass != 0 || bm % rows_per_pass != 0) return false;
  return smem_bytes(d, bm, bn, stages, 2) <= kMaxSmemBytes;
}

// A tiling of the kernel (the template arguments other than IO, D and CAUSAL).
struct Tiling {
  int bm, bn, warps, stages;
};

// Tuning candidates per head dim, fastest first on H100 SXM (fp16, B*N = 16k tokens, hidden 2048,
// N = 1k..16k, causal and not; numbers in dev/a1/README.md). All but the 8-warp one fit the 99 KiB
// of sm_86 / sm_89. Host-only: NVRTC never needs these lists.
#if !defined(__CUDACC_RTC__)
inline constexpr Tiling kTilingsD64[] = {{128, 128, 4, 1}, {128, 128, 4, 2}, {128, 64, 4, 1}, {64, 64, 4, 2}, {64, 128, 4, 2}};
inline constexpr Tiling kTilingsD128[] = {{128, 64, 4, 1}, {128, 64, 4, 2}, {256, 64, 8, 2} /* 128 KiB */, {128, 32, 4, 2}, {64, 64, 4, 2}};
inline constexpr Tiling kTilingsD256[] = {{64, 64, 4, 1}, {64, 32, 4, 2}};   // correct, not tuned
#endif

}  // namespace qattn::prefill_fp16

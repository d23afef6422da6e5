// Shape rules of the linear kernels (qattn/linear/: C = A·Wᵀ + bias), shared by the host (validate,
// search space, launch) and the device code, so the two sides never disagree on shared memory or the
// split-K granularity. Plain C++: no includes beyond abi.h.
//
// Tiling fields per dataflow (grid = (ceil(N / bn), ceil(M / bm), splits), warps * 32 threads):
//   gemv  (CUDA cores, gemv.cuh)
//     bm     1, 2, 4 or 8 tokens per CTA
//     bn     output channels per CTA: warps * gemv_rows(bm, w), one row group per warp (with several
//            groups per warp ptxas settles at 72 .. 96 registers and spills a few bytes)
//     warps  1, 2 or 4 (with 8, i.e. __launch_bounds__(256), ptxas settles at 64 or 128 registers
//            and spills a few bytes: fp16 bm 4 / 8 bn 16, int4 bm 2 bn 32)
//     stages 2 .. 4: 16-byte W vectors each lane has in flight per row (the loop's unroll). No cp.async and
//            no shared memory: W is read once, straight into registers, and rows x stages loads per lane
//            already cover the memory latency; A (a few KiB) is read through L1, where every warp of the
//            CTA finds it.
//   flat  (mma.sync, W as the 16-row operand, tokens on the n8 side, flat_gemm.cuh)
//     bm     8 or 16 tokens (one or two n8 fragments)
//     bn     64, 128 or 256 channels; each warp owns bn / warps of them, 1 .. 4 m16 tiles (4 only with
//            4 or 8 warps: with fewer, the unrolled tile copies on top spill on sm_80 / sm_89)
//     warps  1, 2, 4 or 8
//     stages 2 .. 4 cp.async stages of (W tile, A tile[, int4 scales])
//   gemm  (mma.sync, A rows as the 16-row operand, gemm.cuh)
//     bm     64 or 128;  bn 64, 128 or 256;  warps 4 or 8 as 2 x (warps / 2) warp tiles of
//            (bm / 2) x (bn / (warps / 2)), the latter 32 or 64 wide; not 64 x 64 for int4 (the
//            dequantized fragments on top of 128 accumulators spill), nor with 4 warps (255 registers
//            and a spill on sm_90a); int4 not bm 64 with 8 warps (ptxas caps at 128 registers, spills)
//     stages 2 .. 5
//   gemm with wgmma (sm_90a warpgroups, gemm_wgmma.cuh; tiling token _wg)
//     bm     64 or 128: 64-row slabs of tokens, the wgmma M side;  bn 64, 128 or 256: W rows, the N side
//     warps  4 or 8: one or two warpgroups, all of them consumers (no producer warpgroup); a warpgroup
//            owns wg_slabs(bm, warps) slabs (2 only at bm 128 with 4 warps) of wg_n(bm, bn, warps)
//            channels (bn, or bn / 2 when two warpgroups share one slab at bm 64 with 8 warps); at most
//            128 fp32 accumulators per thread (so bm 128 with 4 warps takes bn <= 128)
//     stages 2 .. 5 cp.async stages (the k tile as in the mma.sync gemm); from 3 stages one wgmma group
//            stays in flight across the barrier, so stages - 2 tiles are in flight while one is
//            multiplied (stages - 1 with 2 stages, where the products are waited for every tile)
//     smem   stages 1024-byte aligned (the 128-byte swizzle atoms), int4 A in two 64-k column blocks, and
//            for int8 / int4 two dequantized 16-bit W tiles (bn x bk) after the stages, + 1024 bytes of
//            slack to align the base
//
// k tile (linear_bk): every W row of a stage is 128 bytes for flat (64 fp16 / 128 int8 / 256 int4
// codes) and for gemm with 16-bit weights (64), 64 bytes for gemm with int8 (64) or int4 (128, exactly
// one quantization group). gemv walks K in 16-byte vectors (8 / 16 / 32 codes).
// Split-K: k_split must be a multiple of linear_k_step (the k tile, or the gemv vector), so that every
// CTA starts on a tile (and int4 group) boundary. The last tile of a split or of K may be partial: it is
// zero-filled in 16-byte units, which is why K must be a multiple of 8 (16-bit W), 16 (int8) or 128
// (int4).
//
// Global-memory assumptions (the host checks them): a, w, bias, c 16-byte aligned; lda * 2 and ldw's byte
// stride multiples of 16. C may have any ldc (pairs of outputs are stored as one 4-byte word only when
// ldc is even).
//
// Recommended defaults (to be tuned; all compiled free of spills on sm_80 / sm_89 / sm_90a):
//   gemv  M 1: bm 1, bn 16, warps 4, stages 4 (int4: stages 2);  M 2: bm 2, bn 16 (int4: 8), warps 4,
//         stages 2;  M 3-4: bm 4, bn 8, warps 4, stages 2;  M 5-8: bm 8, bn 8, warps 4, stages 2.
//   flat  bm 8 (M <= 8) or 16, bn 128, warps 4, stages 4 (int4: 3); bn 64 when N / 128 CTAs would not
//         fill the GPU (or split K).
//   gemm  bm 128, bn 128, warps 8, stages 3 (int4: 2);  bm 64, bn 128, warps 4, stages 4 (int4: 3)
//         for M < 512.
//   gemm _wg (sm_90a)  bm 128, bn 128, warps 8, stages 4 (int4: 3, the most that fits);  for M < 512
//         bm 64, bn 128, warps 4, stages 4 (int4: warps 8, stages 3: two warpgroups share the
//         dequantization). Stages are worth more here than in the mma.sync form: 130 .. 190 registers
//         leave one CTA of 8 warps per SM, and only stages - 2 tiles are in flight. Neighbours to tune:
//         bm 128 bn 256 w8 (s4; int8 s3), s5 at bm 128 bn 128 (16-bit, int8), int4 bm 64 bn 128 w4 s4.
#pragma once
#include "qattn/abi.h"

// NVRTC only compiles functions marked for the device; the host compiler knows no such marks.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define QATTN_LINEAR_FN __host__ __device__ constexpr
#else
#define QATTN_LINEAR_FN constexpr
#endif

namespace qattn::linear {

// The sm_90 per-block opt-in limit, less room for the epilogue's static flag. Smaller GPUs allow less
// (sm_80: 163 KiB, sm_86 / sm_89: 99 KiB): the host also compares with the device's own limit.
constexpr int kMaxSmemBytes = 227 * 1024 - 128;

QATTN_LINEAR_FN bool is_16bit(Fmt f) { return f == Fmt::fp16 || f == Fmt::bf16; }
QATTN_LINEAR_FN int weight_bits(Fmt w) { return w == Fmt::int4 ? 4 : w == Fmt::int8 ? 8 : 16; }

// gemv: W rows a warp streams at once (rows x stages 16-byte loads in flight per lane; the fp32 partial
// sums are rows x bm registers per lane).
// (int4 at bm 2 keeps 2: with 4, ptxas settles at 128 registers on sm_89 and spills.)
QATTN_LINEAR_FN int gemv_rows(int bm, Fmt w) { return bm == 1 || (bm == 2 && w != Fmt::int4) ? 4 : 2; }
// gemv: codes of one 16-byte W vector.
QATTN_LINEAR_FN int gemv_vector_codes(Fmt w) { return 128 / weight_bits(w); }

// Bytes of one W row of a pipeline stage, and the k tile it holds.
QATTN_LINEAR_FN int w_row_bytes(Dataflow flow, Fmt w) {
  return flow == Dataflow::flat || is_16bit(w) ? 128 : 64;
}
QATTN_LINEAR_FN int linear_bk(Dataflow flow, Fmt w) { return w_row_bytes(flow, w) * 8 / weight_bits(w); }

// int4: quantization groups per k tile (scales and zero points staged with the tile).
QATTN_LINEAR_FN int groups_per_tile(Dataflow flow, Fmt w) {
  return w == Fmt::int4 ? linear_bk(flow, w) / kLinearInt4Group : 0;
}

QATTN_LINEAR_FN int round_up(int x, int m) { return (x + m - 1) / m * m; }

// Per stage: the W tile (bn rows), the A tile (bm rows of bk 16-bit elements) and, for int4, the fp32
// (scale, zero) pairs of every row and group of the tile; each region on a 128-byte boundary.
QATTN_LINEAR_FN int w_tile_bytes(Dataflow flow, Fmt w, int bn) { return bn * w_row_bytes(flow, w); }
QATTN_LINEAR_FN int a_tile_bytes(Dataflow flow, Fmt w, int bm) { return bm * linear_bk(flow, w) * 2; }
QATTN_LINEAR_FN int sz_tile_bytes(Dataflow flow, Fmt w, int bn) {
  return round_up(bn * groups_per_tile(flow, w) * 8, 128);
}
QATTN_LINEAR_FN int stage_bytes(Dataflow flow, Fmt w, int bm, int bn) {
  return w_tile_bytes(flow, w, bn) + a_tile_bytes(flow, w, bm) + sz_tile_bytes(flow, w, bn);
}

// gemm, wgmma form: a stage (the same regions, the whole on a 1024-byte multiple: the swizzle atoms of
// the wgmma operands are 1024-byte aligned), the two dequantized W tiles (int8 / int4: bn rows of bk
// 16-bit elements each, double-buffered so that one is written while wgmma reads the other), and the
// slack that aligns the dynamic shared-memory base.
constexpr int kWgmmaAlignBytes = 1024;
QATTN_LINEAR_FN int wg_stage_bytes(Fmt w, int bm, int bn) {
  return round_up(stage_bytes(Dataflow::gemm, w, bm, bn), kWgmmaAlignBytes);
}
QATTN_LINEAR_FN int wg_dequant_bytes(Fmt w, int bn) { return is_16bit(w) ? 0 : 2 * bn * linear_bk(Dataflow::gemm, w) * 2; }

// Dynamic shared memory of a launch (gemv uses none).
QATTN_LINEAR_FN int linear_smem_bytes(Dataflow flow, Fmt a, Fmt w, int bm, int bn, int warps, int stages,
                                      bool wgmma) {
  (void)a, (void)warps;
  if (flow == Dataflow::gemv) return 0;
  if (wgmma) return kWgmmaAlignBytes + stages * wg_stage_bytes(w, bm, bn) + wg_dequant_bytes(w, bn);
  return stages * stage_bytes(flow, w, bm, bn);
}

// The granularity of LinearParams::k_split.
QATTN_LINEAR_FN int linear_k_step(Dataflow flow, Fmt w, int bn, int warps) {
  (void)bn, (void)warps;
  return flow == Dataflow::gemv ? gemv_vector_codes(w) : linear_bk(flow, w);
}

// gemm: the warp tile.
QATTN_LINEAR_FN int gemm_warp_m(int bm) { return bm / 2; }
QATTN_LINEAR_FN int gemm_warp_n(int bn, int warps) { return bn / (warps / 2); }

// gemm, wgmma form: 64-row slabs per warpgroup and the wgmma n of each (two warpgroups on one slab split
// bn in halves).
QATTN_LINEAR_FN int wg_slabs(int bm, int warps) { return bm / 64 > warps / 4 ? bm / 64 / (warps / 4) : 1; }
QATTN_LINEAR_FN int wg_n(int bm, int bn, int warps) { return bm / 64 >= warps / 4 ? bn : bn / (warps / 4); }

// nullptr when (a, w, tiling) is supported, else why not.
QATTN_LINEAR_FN const char* linear_tiling_problem(Dataflow flow, Fmt a, Fmt w, int bm, int bn, int warps,
                                                  int stages, bool wgmma) {
  if (!is_16bit(a)) return "linear: A must be fp16 or bf16";
  if (is_16bit(w) && w != a) return "linear: 16-bit W must have A's format";
  if (!is_16bit(w) && w != Fmt::int8 && w != Fmt::int4) return "linear: W must be fp16, bf16, int8 or int4";
  if (wgmma) {
    if (flow != Dataflow::gemm) return "linear: the wgmma form (_wg) is the gemm dataflow's";
    if (bm != 64 && bm != 128) return "linear gemm wgmma: bm must be 64 or 128 (64-row slabs)";
    if (bn != 64 && bn != 128 && bn != 256) return "linear gemm wgmma: bn must be 64, 128 or 256";
    if (warps != 4 && warps != 8) return "linear gemm wgmma: warps must be 4 or 8 (one or two warpgroups)";
    if (wg_slabs(bm, warps) * wg_n(bm, bn, warps) > 256)
      return "linear gemm wgmma: at most 128 fp32 accumulators per thread (bm 128 with 4 warps: bn <= 128)";
    if (stages < 2 || stages > 5) return "linear gemm wgmma: stages must be 2 .. 5";
    if (linear_smem_bytes(flow, a, w, bm, bn, warps, stages, wgmma) > kMaxSmemBytes)
      return "linear: the stages need more than 227 KiB of shared memory";
    return nullptr;
  }
  if (flow == Dataflow::gemv) {
    if (bm != 1 && bm != 2 && bm != 4 && bm != 8) return "linear gemv: bm must be 1, 2, 4 or 8";
    if (warps != 1 && warps != 2 && warps != 4) return "linear gemv: warps must be 1, 2 or 4";
    if (bn != warps * gemv_rows(bm, w))
      return "linear gemv: bn must be warps * rows per warp (4 at bm 1 and at bm 2 without int4, else 2)";
    if (stages < 2 || stages > 4) return "linear gemv: stages (loads in flight per row) must be 2 .. 4";
    return nullptr;
  }
  if (flow == Dataflow::flat) {
    if (bm != 8 && bm != 16) return "linear flat: bm must be 8 or 16";
    if (bn != 64 && bn != 128 && bn != 256) return "linear flat: bn must be 64, 128 or 256";
    if (warps != 1 && warps != 2 && warps != 4 && warps != 8) return "linear flat: warps must be 1, 2, 4 or 8";
    if (bn % (16 * warps) != 0 || bn / (16 * warps) > 4)
      return "linear flat: each warp needs 1 .. 4 m16 tiles (bn / warps in 16 .. 64)";
    if (bn / warps == 64 && warps < 4) return "linear flat: 64 channels per warp need 4 or 8 warps (fewer spill)";
    if (stages < 2 || stages > 4) return "linear flat: stages must be 2 .. 4";
  } else if (flow == Dataflow::gemm) {
    if (bm != 64 && bm != 128) return "linear gemm: bm must be 64 or 128";
    if (bn != 64 && bn != 128 && bn != 256) return "linear gemm: bn must be 64, 128 or 256";
    if (warps != 4 && warps != 8) return "linear gemm: warps must be 4 or 8";
    const int wn = gemm_warp_n(bn, warps);
    if (wn != 32 && wn != 64) return "linear gemm: bn / (warps / 2) must be 32 or 64";
    if (gemm_warp_m(bm) == 64 && wn == 64 && (warps == 4 || w == Fmt::int4))
      return "linear gemm: 64 x 64 warp tiles spill with 4 warps or int4 weights";
    if (w == Fmt::int4 && bm == 64 && warps == 8) return "linear gemm: int4 with bm 64 and 8 warps spills (sm_90a)";
    if (stages < 2 || stages > 5) return "linear gemm: stages must be 2 .. 5";
  } else {
    return "linear: dataflow must be gemv, flat or gemm";
  }
  if (linear_smem_bytes(flow, a, w, bm, bn, warps, stages, wgmma) > kMaxSmemBytes)
    return "linear: the stages need more than 227 KiB of shared memory";
  return nullptr;
}

}  // namespace qattn::linear

#undef QATTN_LINEAR_FN

// Shape rules of the INT8 prefill attention kernel (prefill_int8.cuh). Plain C++, shared by the host
// (generator, tuner) and the device code, so the two sides can never disagree on shared memory.
//
// Valid tilings (tiling_ok):
//   d      64, 96, 128 or 256        the Q·K^T k-loop runs in 32-byte mma steps, ldmatrix.x4 in 64s
//                                    (d = 96: one x4, then an x2 for the last step). Q and K tiles
//                                    are column blocks of one swizzle atom each (prefill_int8/layout.cuh,
//                                    kAtomBytes): 1 x d bytes at 64 / 128, 2 x 128 at 256, 3 x 32 at 96.
//   warps  4 or 8                    each warp owns bm / warps query rows.
//   bm     16 * warps * {1, 2}       every warp holds one or two m16 mma tiles of rows (64 .. 256).
//   bn     32, 64 or 128             the P·V k-loop runs in 32-key steps; bn divides kVPadTokens (128)
//                                    so a K/V tile never reads past the zero padding of V^T.
//   stages 2 .. 4                    cp.async ring of K, V^T and K-scale tiles.
//   registers                        the per-thread arrays (int32 O, the S tile, Q fragments) stay
//                                    <= kMaxArrayRegisters, which keeps ptxas from spilling (checked
//                                    for every valid tiling on sm_80 .. sm_90a).
//   not (d 128, bn 128, 8 warps)     (mma.sync form) ptxas spills 8 bytes for its causal form on sm_80 .. sm_89, and
//                                    it is slower than bm 64 / 4 warps on H100 anyway.
//   not (d 96, bn 128, 3 stages)     (mma.sync form) ptxas spills 4 bytes (causal, sm_80 and sm_90a).
//   Q smoothing (qsmooth) also not:  ptxas settles below its limit and spills (causal): bm 64 with 4 warps at
//                                    d 128 bn 64 3 stages (8 bytes, sm_80), d 128 bn 128 3 stages (4, sm_90a),
//                                    d 96 bn 64 2 stages (4, sm_90a); d 64 bm 128 bn 64 8 warps 2 stages
//                                    (8, sm_80). Swept: every tiling at d 64 / 96 / 128 / 256 causal on
//                                    sm_80 and sm_90a, d 128 on sm_89.
//   d 256                            the int32 O alone is 128 registers: one row tile per warp, and the
//                                    register rule leaves bn 32 to the mma.sync form (its Q fragments
//                                    are another 32), bn 64 to the wgmma form.
//   smem_bytes <= 227 KiB            the sm_90 per-block opt-in limit. Smaller GPUs allow less
//                                    (sm_80: 163 KiB, sm_86 / sm_89: 99 KiB): the host must also
//                                    compare smem_bytes with the device's opt-in limit.
// The warpgroup (wgmma, sm_90a) form adds:
//   bm     16 * warps                 one warpgroup per 64 query rows (warps 4 or 8).
//   bn     64 or 128                  the wgmma shapes m64n64 / m64n128 of Q·K^T.
//   P·V    m64n<d>: n64, n128; d = 96 as n64 + n32 and d = 256 as two n128 (wgmma.cuh).
//
// pv=fp16 (mma.sync form only) / fp8e4m3 (both forms): the fp16/bf16 V tile is bn x d x 2 bytes
// (v_bytes = 2) in place of the int8 V^T tile; fp8 V^T is 1 byte per element like int8. O is fp32 (same registers as
// int32) or, with accum=fp16, half2 (d / 4 registers per m16 tile: half_o).
// The packed-int4 form (S4, tiling token _i4mma; qk=int4 only, mma.sync only) holds Q and K rows of
// d / 2 bytes (two int4 codes per byte): Q and K tiles are half as large, the Q fragments take d / 16
// registers (k64 steps of 32 bytes; d = 96 ends with a half step) instead of d / 8.
//
// Shared memory: the int8 Q tile (bm x d), then per stage a K tile (bn x d), a V^T tile (d x bn) and
// the bn K scales (fp32); with S4 the Q and K tiles are bm x d/2 and bn x d/2 bytes. The warpgroup form keeps every tile on a 1024-byte boundary (its swizzle
// atom): the scales of all stages follow the last V^T tile, and 1 KiB of slack aligns the base.
// The fused-Q form (tiling token _qf) appends fused_q_bytes: each Q row's abs-max, then its scale (fp32).
// Q smoothing (mma.sync form only) appends qsmooth_bytes: the A fragments of the block means (16 d),
// the staged ΔS of one KV tile (bm / 64 rows x bn fp32) and the block means' scales (8 fp32).
#pragma once

// NVRTC only compiles functions marked for the device; the host compiler knows no such marks.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define QATTN_INT8_SHAPE_FN __host__ __device__ constexpr
#else
#define QATTN_INT8_SHAPE_FN constexpr
#endif

namespace qattn {
namespace prefill_int8 {

constexpr int kMaxSmemBytes = 227 * 1024;
constexpr int kMaxArrayRegisters = 176;

// v_bytes: bytes per V element in the stage tiles: 1 for int8 and fp8 V^T, 2 for the fp16/bf16 V of
// pv=fp16 (which the kernel reads as given, row-major).
// Bytes of one Q or K row in shared and global memory: d int8 codes, or d int4 codes packed in pairs.
QATTN_INT8_SHAPE_FN int qk_row_bytes(int d, bool s4 = false) { return s4 ? d / 2 : d; }

// Q smoothing's shared memory (prefill_int8/q_smoothing.cuh): after everything else.
QATTN_INT8_SHAPE_FN int qsmooth_bytes(int d, int bm, int bn) { return 16 * d + 4 * (bm / 64) * bn + 4 * 8; }

// The fused-Q form's two floats per Q row (abs-max, then scale), after everything else.
QATTN_INT8_SHAPE_FN int fused_q_bytes(int bm) { return 8 * bm; }

// TMA loads (_tma): one 8-byte mbarrier per stage, then the K scales' address (8 bytes), after
// everything else; the warp-specialized form (_ws) adds a second mbarrier per stage (stage free).
QATTN_INT8_SHAPE_FN int tma_barrier_bytes(int stages, bool ws = false) { return 8 * stages + 8 + (ws ? 8 * stages : 0); }

// The warp-specialized form (_ws): the tiling's warps compute, one more warpgroup loads; the CTA count
// per SM is fixed (1 with two consumer warpgroups, 2 with one), which sets the registers the producer
// hands to the consumers (prefill_int8/warp_specialized.cuh).
QATTN_INT8_SHAPE_FN int ws_threads(int warps) { return warps * 32 + 128; }
QATTN_INT8_SHAPE_FN int ws_blocks_per_sm(int warps) { return warps == 8 ? 1 : 2; }

QATTN_INT8_SHAPE_FN int smem_bytes(int d, int bm, int bn, int stages, bool wg = false, int v_bytes = 1,
                                   bool s4 = false, bool qsmooth = false, bool q_fused = false, bool tma = false,
                                   bool ws = false) {
  return bm * qk_row_bytes(d, s4) + stages * (bn * qk_row_bytes(d, s4) + v_bytes * bn * d + 4 * bn) + (wg ? 1024 : 0) +
         (qsmooth ? qsmooth_bytes(d, bm, bn) : 0) + (q_fused ? fused_q_bytes(bm) : 0) +
         (tma || ws ? tma_barrier_bytes(stages, ws) : 0);
}

QATTN_INT8_SHAPE_FN int gcd(int a, int b) { return b == 0 ? a : gcd(b, a % b); }

// m16 row tiles per warp (0 when bm does not split into whole m16 tiles per warp).
QATTN_INT8_SHAPE_FN int row_tiles_per_warp(int bm, int warps) {
  return (warps > 0 && bm % (16 * warps) == 0) ? bm / (16 * warps) : 0;
}

// Registers per thread of the O accumulator (int32 or fp32: d / 2 per m16 tile; half2 O of accum=fp16:
// d / 4), the S tile and the Q fragments (4 per 32-byte k-step of a Q row; wgmma reads Q from smem).
QATTN_INT8_SHAPE_FN int array_registers(int d, int bm, int bn, int warps, bool wg = false, bool half_o = false,
                                        bool s4 = false) {
  return row_tiles_per_warp(bm, warps) *
         ((half_o ? d / 4 : d / 2) + bn / 2 + (wg ? 0 : 4 * ((qk_row_bytes(d, s4) + 31) / 32)));
}

// The mma.sync tilings whose Q-smoothing form spills (int8 P·V; see the top).
QATTN_INT8_SHAPE_FN bool qsmooth_spills(int d, int bm, int bn, int warps, int stages) {
  return (bm == 64 && warps == 4 &&
          ((d == 128 && bn == 64 && stages == 3) || (d == 128 && bn == 128 && stages == 3) ||
           (d == 96 && bn == 64 && stages == 2))) ||
         (d == 64 && bm == 128 && bn == 64 && warps == 8 && stages == 2);
}

QATTN_INT8_SHAPE_FN bool tiling_ok(int d, int bm, int bn, int warps, int stages, bool wg = false, int v_bytes = 1,
                                   bool half_o = false, bool s4 = false, bool qsmooth = false) {
  if (wg && (row_tiles_per_warp(bm, warps) != 1 || bn == 32)) return false;
  if (s4 && wg) return false;   // the packed-int4 products exist in the mma.sync form only
  // Packed int4 at d 96, bm 128 / bn 64 / 4 warps / 3 stages: ptxas spills 16 bytes on sm_80 and sm_89
  // once S is raw (zeroed) rather than biased (prefill_int4_compile_test catches it).
  if (s4 && d == 96 && bm == 128 && bn == 64 && warps == 4 && stages == 3) return false;
  if (qsmooth && (wg || s4 || qsmooth_spills(d, bm, bn, warps, stages))) return false;
  return (d == 64 || d == 96 || d == 128 || d == 256) && (warps == 4 || warps == 8) &&
         (row_tiles_per_warp(bm, warps) == 1 || row_tiles_per_warp(bm, warps) == 2) &&
         (bn == 32 || bn == 64 || bn == 128) && stages >= 2 && stages <= 4 &&
         !(d == 128 && bn == 128 && warps == 8 && !wg) && !(d == 96 && bn == 128 && stages == 3 && !wg) &&
         !(wg && v_bytes != 1) && array_registers(d, bm, bn, warps, wg, half_o, s4) <= kMaxArrayRegisters &&
         smem_bytes(d, bm, bn, stages, wg, v_bytes, s4, qsmooth) <= kMaxSmemBytes;
}

}  // namespace prefill_int8
}  // namespace qattn

#undef QATTN_INT8_SHAPE_FN

// Quantized prefill attention, every Q/K and P·V format in one template. The base case is
// INT8 (INT-FlashAttention): both Q·K^T and P·V run on int8 tensor cores (mma.sync m16n8k32, int32
// accumulate), FlashAttention-2 style: one CTA per (query tile, head, batch), each warp owns 16 or 32
// query rows, K / V^T tiles stream through a cp.async ring. The other formats (fp16 / fp8 P·V, packed
// INT4 Q/K, Q smoothing) are described below, each at its template parameter.
//
// Numerics, per query row (logits in base 2):
//   u   = (Q̂·K̂^T) · k_scale[key]                    int32 to fp32 (see Scores)
//   L   = u · q_scale[row] · softmax_scale · log2(e)
//   R   = reference max, R >= every L seen; set to the first tile's max, then raised by whole steps
//         (R += ceil(tile max - R + kHeadroom)) when a tile exceeds it
//   P̂   = round(254.51 · 2^(L - R)) ∈ [0, 255]       u8 A operand of the P·V mma
//   O  += P̂·V̂    in the mma's own int32 accumulators: exact, and no per-tile float work on O
//   when R rises by k:  O, l <- floor(O / 2^k), ...   (one shift per element; mostly in the first
//                       tiles of a row, where its running max still climbs)
//   out = O · v_scale[c] / l (+ v_mean[c])
// Compared with the paper (P̂ = round(127 · exp(S - m)), P̂·V converted and rescaled into an fp32 O
// every tile): P is unsigned with 255 levels (mma .u8.s8) and O stays int32, so the per-element
// float work is only the logits and the exponentials, which bound the speed once the matmuls are int8.
//
// The row sum l: Σ P̂ (paper) or Σ 254.51 · 2^(L - R) before rounding. P̂ flushes probabilities under
// ~1/510 of R to 0. With Σ P̂ the lost mass leaves the denominator too (O = weighted mean of the
// surviving keys: right when V is not centred); with the exact sum the lost keys count as V = 0
// (right when V is centred, which V smoothing guarantees). The kernel takes the exact sum when V is
// smoothed (template parameter VSMOOTH, from the spec's smooth=v; p.v_mean is then set) and Σ P̂
// otherwise; on outlier-heavy data this halves the error with smoothing. The exact sum (an fp16 pair add
// per two probabilities) is always kept: the LSE needs it (Σ P̂ drops the mass of the flushed keys,
// which on a flat row of 4k keys moves the LSE by up to 0.2). Σ P̂ (a byte dot product per four codes)
// is counted only where it is l; with the exact sum, the overflow guard of long rows reads that instead
// (kLxRescale), so those kernels keep no Σ P̂ at all (two registers and its shifts fewer).
//
// Schedule per tile: wait for the tile, one barrier, issue the load of tile t + STAGES - 1, then
// Q·K^T, logits, softmax and P·V. (Not issuing the Q·K^T of tile t+1 before the softmax of tile t: its
// second S tile costs the registers of a second row tile, and the overlap gains nothing back.)
// Loads: every thread's cp.async (waited per thread, then the barrier), or (TMA, wgmma form at d 64 /
// 128) one thread's tensor-map boxes of K and V^T on the stage's mbarrier, which every thread waits on;
// the K scales stay a cp.async per thread. Same bytes, same shared-memory layout (the GPU test compares
// the outputs bit for bit); TMA frees the threads' issue slots and registers that cp.async addressing
// takes.
//
// Overflow: |S| <= d · 128² < 2^22 (the bias trick); a thread's share of Σ P̂ is kept <= 2^21 by an
// extra halving, so |O| <= 127 · 4 · (2^21 + 255 · bn / 4) < 2^31. With the exact sum the guard reads
// that sum's share instead (kLxRescale), which bounds Σ P̂'s share by 1.9 · 2^21: |O| < 2^31 still.
//
// Masking: keys >= kv_len and, when CAUSAL, keys > row + (kv_len - q_len) get P̂ = 0 exactly; rows that
// see no key write zeros (lse = -inf). Tiles that need no mask take a mask-free path.
// lse is that of the logits the kernel sees: with K smoothing it lacks softmax_scale · q·mean_k
// (see lse_correction.cuh); Q smoothing adds nothing to correct (ΔS restores q̄_b·k).
//
// Q smoothing (QSMOOTH, smooth=q; SageAttention2 §3.3; mma.sync form only, validate() refuses _wg):
//   the quantizer subtracted from Q the per-channel mean q̄_b of each block b of kQMeanBlock (64) rows
//   (p.q_mean, [b, h_q, ceil(q_len / 64), d]), so Q̂ holds Q - q̄_b. The true score is
//   S = (Q - q̄_b)·K + q̄_b·K, and the second term differs per key, so it must join S before the row
//   max and carry the same softmax_scale: u += ΔS · mscale / q_scale (units of u; see dsf).
//   With K smoothing, K here is already K - mean_k, and ΔS uses that same K̂ (the LSE fix then adds
//   q·mean_k with the full q, as without Q smoothing; ΔS itself restores the true logits, so the Q part
//   needs no LSE correction).
//   ΔS on the tensor cores: the bm / 64 block means of a CTA (1 .. 4) are rows of one m16 A tile,
//   quantized once at CTA start (prepare_block_means) as two int8 codes each, high codes in rows
//   0 .. 3 and the rounding residual × 254 in rows 8 .. 11 (the mean repeats in 64 rows, so its own
//   rounding must stay far below Q̂'s: ~amax/64500). Per KV tile one m16 × bn product (d / 32
//   mma.m16n8k32 per n8 block, the n8 blocks split over the warps: block_mean_scores) gives ΔS of every
//   block mean for every key; the warps stage ΔS · k_scale in shared memory and every thread reads
//   its own keys (float2 pairs, in the order of the K scales) in logits().
//   Synchronisation: one extra __syncthreads per tile, between the ΔS stores and the logits. It sits
//   after the warp's own Q·K^T (whose mma latency overlaps the wait), and one ΔS buffer suffices: the
//   next tile's stores come after the loop's top barrier, which every thread passes only after its
//   reads. (Computing ΔS of tile t + 1 during tile t would save the barrier but needs tile t + 1
//   resident one tile earlier, i.e. one stage less of prefetch; not done.)
//   Cost: a warp's share of the ΔS mmas is 1 / (warps · m16 row tiles per warp) of its Q·K^T mmas,
//   plus per score one FMA and half of a float2 load.
//   INT4 K (m16n8k64 .s4): both operands are 4-bit there, so the block means need 4-bit codes: rows
//   0 .. 3 round(q̄ / s) in [-7, 7] and rows 8 .. 11 the residual × 14 give only ~amax / 200; a second
//   mma per k-step (another m16 tile of two more residual levels) brings it near the int8 form's
//   precision. That is block_mean_scores' inner loop; the staging and logits() need no change.
//
// Two forms of the two products (template parameter WG):
//   mma.sync (sm_80+): each warp multiplies its 16 or 32 rows; Q fragments live in registers.
//   wgmma (sm_90a):    each warpgroup (4 warps, 64 rows) issues wgmma.mma_async: Q·K^T with both
//                      operands in shared memory, P·V with P straight from registers. The smem tiles
//                      are already in the hardware's swizzled K-major layout (wgmma.cuh), and the
//                      accumulator / A-operand fragments equal the mma.sync ones, so the softmax code
//                      is shared. It is the faster form, so the default, on sm_90a. d = 96 and 256 keep Q and K
//                      as column blocks of one swizzle atom (kAtomBytes) and split P·V's n (wgmma.cuh).
// Not in the wgmma form either, because slower: issuing the Q·K^T of tile t + 1 before the softmax of
// tile t (two S tiles need 237+ registers: 2 CTAs per SM), and the exponentials as ex2.approx.f16x2
// pairs (the exponentials are not the limit).
//
// P·V formats other than int8 (template parameters PV and ACC, last). pv=fp16 runs in the
// mma.sync form only, pv=fp8e4m3 in both forms:
//   pv=fp16          P = 2^(L - R) rounded to the V type (fp16, or bf16 for bf16 inputs: the loader
//                    copies V as given with cp.async, no conversion pass, and bf16 P's 8-bit mantissa
//                    is far below the int8 Q·K^T error), V read row-major from the caller's tensor (no
//                    quantization pass), mma m16n8k16. The V tile keeps K's row permutation
//                    (k_smem_row), so the S accumulators of n8 blocks 2i, 2i + 1 are P's k16 A
//                    fragment as they are, and ldmatrix.trans reads V rows in that order.
//     accum=fp32     O fp32 (d / 2 registers per m16 tile, as the int32 O).
//     accum=fp16     O half2 (mma .f16 accumulate, SageAttention's sm_80 / sm_86 path; fp16 V only).
//                    fp16 overflows at 65504, so a row whose share of Σ P passes kHalfLShare raises R
//                    by one step (halving O and l): |O| <= ~256 · max|V|.
//   pv=fp8e4m3       P̃ = 448 · 2^(L - R) to e4m3 (RNE, saturating; the 448 cancels in O / l), V^T as
//   :per_channel     e4m3 codes of (V - mean) / δ_V[c], δ_V[c] = max_t |V[t, c] - mean_c| / 448 (the
//                    transposing quantizer), mma m16n8k32 .e4m3 (sm_89+) or, in the wgmma form,
//                    wgmma m64n<d>k32 .e4m3 (QGMMA, pv_fp8_wgmma); out = O · δ_V[c] / l (+ mean).
//     accum=fp32     straight into the fp32 O, in the mma's own accumulate. sm_89's FP8 mma keeps only
//                    ~FP22 there (SageAttention2), and so does the sm_90a wgmma: long rows lose low
//                    bits of O (the AccumulationModes GPU test shows it on 32768-key rows against
//                    two_level; with smooth=kv the partial sums stay small and it holds). On
//                    sm_90 ptxas turns the mma.sync form into FP16 conversions + HMMA.16816.F32
//                    (in SASS): full fp32, so two_level gives the same accuracy there.
//     accum=two_level  a zeroed accumulator per (n8 block, KV tile) — wgmma: per KV tile, up to 128
//                    columns of O — added to O after the tile: the reduced-precision sums cover bn
//                    keys, the row's sum is true fp32; the extra adds per tile make it a little slower.
//   Both keep the integer-step reference max R (O *= 2^-k when R rises by k, an exact power-of-two
//   scale) rather than FA2's exp(m_old - m_new) per tile: the softmax code stays one path for all
//   formats, rescales stay rare (whole steps), and P's range is fixed ([0, 1] or [0, 448]), which e4m3
//   and fp16 P need. The row sum l is the exact fp32 sum before rounding (no integer range to keep).
//   At d = 256, pv=fp16 reloads the Q fragments from the resident Q tile every KV tile (kQInRegs):
//   with the fp32 O and 16-bit P fragments, keeping them spilled on sm_80 .. sm_90a.
// Packed INT4 Q/K (template parameter S4, tiling token _i4mma; qk=int4, mma.sync form only): Q and K
// hold codes in [-7, 7] packed two per byte (element 2i in the low nibble of byte i), rows of d / 2
// bytes, and Q·K^T runs on mma.sync m16n8k64 .s4. A packed row of d int4 codes has, byte for byte, the
// fragment layout of an int8 row of d / 2 bytes (an s4 k64 step reads the same 32 bytes per row, at
// the same lanes, as an s8 k32 step), so the Q / K tiles, swizzle, loader and ldmatrix run unchanged
// on "QK row bytes" kQB = d / 2; only the mma differs. d = 96 (48 bytes) ends with a half step: its
// upper 16 bytes of A and B are zero registers, and the tiles are three 16-byte atoms (no swizzle
// needed: 8 rows of one atom are 128 contiguous bytes). P·V is unchanged (u8 P, int8 V^T), and the
// bias trick holds with room to spare (|S| <= d · 7 · 7). On sm_90 the s4 mma is emulated (slow):
// there int4 specs run this kernel with S4 = false on the same [-7, 7] codes stored as int8.
//
// Requirements on the tensors (see abi.h): Q, K, O rows contiguous (sc = 1); V^T rows (sc = row stride)
// zero-padded to kVPadTokens tokens (pv=fp16: V rows contiguous, 16-byte aligned, not padded); every
// row start 16-byte aligned (int8 tensors) or 4-byte aligned (O); softmax_scale > 0.
#pragma once

#include "qattn/abi.h"
#include "qattn/attention/prefill_int8_shape.h"
#include "qattn/attention/tile_order.h"
#include "qattn/common/common.cuh"
#include "qattn/common/fp8_cvt.cuh"
#include "qattn/common/int8_ptx.cuh"
#include "qattn/common/tma.cuh"
#include "qattn/common/wgmma.cuh"
#include "qattn/quant/quant_device.cuh"

namespace qattn {
namespace prefill_int8 {

// Slightly under 255 so that fp32 rounding near L = R can never produce 256 (a wrapped byte).
constexpr float kPScale = 254.51f;
constexpr float kLog2PScale = 7.9915785f;   // log2(kPScale)
constexpr dev::u32 kLRescale = 1u << 21;    // a thread's share of Σ P̂ above this halves O and l
// The same guard on the exact sum's share (kernels that keep no Σ P̂). round(y) <= 2y for every y >= 0
// and the fp16 pair sums err by under 1%, so a share of the exact sum under 15/16 · 2^21 keeps Σ P̂'s
// under 1.9 · 2^21.
constexpr float kLxRescale = static_cast<float>(kLRescale) * (15.f / 16.f);
// Least distance (log2 units) from a raised R down to the max that raised it: more headroom, fewer
// rescales, coarser P̂. 0 by default: a headroom buys fewer rescales with more error on un-smoothed V,
// and 1.0 fails the cos >= 0.999 bound there.
#ifndef QATTN_INT8_HEADROOM
#define QATTN_INT8_HEADROOM 0.0f
#endif
constexpr float kHeadroom = QATTN_INT8_HEADROOM;

// pv=fp8e4m3: P̃ = kFp8PScale · 2^(L - R) uses the whole e4m3 range (max 448); the 1/448 cancels against
// the same factor in the row sum l.
constexpr float kFp8PScale = 448.f;
constexpr float kLog2Fp8PScale = 8.80735492f;   // log2(448)
// accum=fp16: a row's share of Σ P per thread above this raises R by one step (halves O and l), so the
// half2 O stays below (4 · kHalfLShare + bn) · max|V| <= 256 · max|V| (fp16 overflows at 65504).
constexpr float kHalfLShare = 32.f;

template <bool B, class T, class F> struct Pick { using type = T; };
template <class T, class F> struct Pick<false, T, F> { using type = F; };

// PV (P·V operand format), ACC (its accumulation), S4 (packed int4 Q·K^T) and QSMOOTH (Q smoothing)
// come last, with defaults that give the int8 kernel.
template <Gran V_GRAN, Fmt OUT, int D, bool CAUSAL, int BM, int BN, int WARPS, int STAGES, bool WG = false,
          Fmt PV = Fmt::int8, Accum ACC = Accum::fp32, bool S4 = false, bool QSMOOTH = false, bool INT4 = false,
          Gran QF = Gran::none, bool VSMOOTH = false, bool KBLOCK = false, bool TMA = false>
struct Kernel {
  static_assert(QF == Gran::none || QF == Gran::per_token || QF == Gran::per_warp || QF == Gran::per_thread ||
                    QF == Gran::per_block,
                "prefill_int8: the fused Q (QF) takes token-local Q scales: per_token, per_warp, per_thread, per_block");
  static_assert(QF == Gran::none || !(S4 || QSMOOTH), "prefill_int8: the fused Q writes plain int8 Q codes (no S4, no smooth=q)");
  static_assert(!S4 || INT4, "prefill_int8: the packed form (S4) holds qk=int4 codes");
  static_assert(!(KBLOCK && QSMOOTH), "prefill_int8: KBLOCK folds K's scale into the row factor; smooth=q adds ΔS in scaled units");
  static_assert(!(S4 && WG), "prefill_int8: the packed-int4 Q·K^T (S4) exists in the mma.sync form only");
  static_assert(!(QSMOOTH && WG), "prefill_int8: Q smoothing exists in the mma.sync form only");
  static_assert(!(QSMOOTH && S4), "prefill_int8: Q smoothing's ΔS mma reads int8 K tiles (no S4)");
  static_assert(BM % kQMeanBlock == 0, "prefill_int8: bm must be a whole number of Q-mean blocks");
  static_assert(PV == Fmt::int8 || PV == Fmt::fp16 || PV == Fmt::fp8e4m3, "prefill_int8: pv must be int8, fp16 or fp8e4m3");
  static_assert(PV == Fmt::fp16 ? V_GRAN == Gran::none
                                : (V_GRAN == Gran::per_channel || (PV == Fmt::int8 && V_GRAN == Gran::per_tensor)),
                "prefill_int8: V scale must be per_tensor or per_channel (int8), per_channel (fp8), none (fp16)");
  static_assert(PV != Fmt::fp16 || !WG, "prefill_int8: the wgmma form runs int8 and fp8 P·V (pv=fp16: mma.sync)");
  static_assert(ACC == Accum::fp32 || (ACC == Accum::fp16 && PV == Fmt::fp16 && OUT == Fmt::fp16) ||
                    (ACC == Accum::two_level && PV == Fmt::fp8e4m3),
                "prefill_int8: accum=fp16 needs pv=fp16 with fp16 V, accum=two_level needs pv=fp8e4m3");
  static_assert(OUT == Fmt::fp16 || OUT == Fmt::bf16, "prefill_int8: output must be fp16 or bf16");
  static_assert(!TMA || (WG && PV != Fmt::fp16 && (D == 64 || D == 128)),
                "prefill_int8: TMA loads (one swizzle atom per K row) exist in the wgmma form at d 64 and 128");

 private:
  static constexpr bool kIntPV = PV == Fmt::int8;       // P̂ u8 · V̂ int8, int32 O (INT-FlashAttention)
  static constexpr bool kHalfV = PV == Fmt::fp16;       // P fp16/bf16 · V as given (type OUT), row-major
  static constexpr bool kHalfO = ACC == Accum::fp16;    // O as half2 (mma .f16 accumulate)
  // l is the exact sum (fp32 of the unrounded P) for float P·V and for smoothed V; else Σ P̂.
  static constexpr bool kExactSum = !kIntPV || VSMOOTH;
  static constexpr int kVBytes = kHalfV ? 2 : 1;
  // pv=fp16 at d = 256: the fp32 O (128 registers) leaves no room for the Q fragments (32) next to the
  // 16-bit P fragments, so Q·K^T reads them from the resident Q tile every KV tile (8 ldmatrix.x4).
  // (S4 keeps them: packed Q fragments are half as many.)
  static constexpr bool kQInRegs = !(kHalfV && D == 256) || S4;

 public:
  static_assert(tiling_ok(D, BM, BN, WARPS, STAGES, WG, kVBytes, kHalfO, S4, QSMOOTH),
                "prefill_int8: invalid tiling (see prefill_int8_shape.h)");
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kSmemBytes = smem_bytes(D, BM, BN, STAGES, WG, kVBytes, S4, QSMOOTH, QF != Gran::none, TMA);

 private:
  using u32 = dev::u32;
  static constexpr int kMT = BM / (16 * WARPS);   // m16 row tiles per warp
  static constexpr int kSN = BN / 8;              // n8 column blocks of S
  static constexpr int kON = D / 8;               // n8 column blocks of O
  static constexpr int kQB = qk_row_bytes(D, S4);   // bytes per Q / K row (S4: d / 2)
  static constexpr int kQKSteps = (kQB + 31) / 32;   // 32-byte steps of Q·K^T (k32 s8 or k64 s4)
  static constexpr int kPVSteps = BN / 32;        // k32 steps of P·V
  // The last KV tile of a CTA whose keys all lie in its first half (causal: every other query tile's
  // diagonal at bm 64, bn 128; ragged kv_len) runs as a half tile: n64 products, half the softmax. Its
  // other half would add exact zeros, so the output is the same. Only where it pays: at d 128 (int8 and
  // fp8) the second copy of the tile step costs more than it saves. So: the TMA form, bn 128, d 64, int8 P·V
  // (the cp.async form and fp8 P·V at d 64 would spill 8 bytes at the 128-register cap with it).
  static constexpr bool kHalfTile = TMA && BN == 128 && D == 64 && kIntPV;
  static constexpr int kDChunks = kQB / 16;       // 16-byte chunks per Q / K row
  // Q and K tiles are stored as kAtoms column blocks ("atoms") of kAtomBytes per row, each a
  // [rows][kAtomBytes] tile swizzled by int8::swizzle: one atom of d bytes at d = 64 and 128, two of
  // 128 at d = 256, three of 32 at d = 96. wgmma needs it (its K-major smem operands have rows of one
  // swizzle atom, 32, 64 or 128 bytes), and ldmatrix reads every layout without bank conflicts.
  // S4 (rows of d / 2 bytes) at d = 96: three atoms of 16 bytes.
  static constexpr int kAtomBytes = kQB % 128 == 0 ? 128 : (kQB % 64 == 0 ? 64 : (kQB % 32 == 0 ? 32 : 16));
  static constexpr int kAtomChunks = kAtomBytes / 16;
  static constexpr int kAtoms = kQB / kAtomBytes;
  static constexpr int kNChunks = BN / 16;        // 16-byte chunks per V^T row
  static constexpr int kKTileBytes = BN * kQB;    // K tile (int8 rows of d bytes, or packed int4 of d / 2)
  static constexpr int kVTileBytes = BN * D * kVBytes;   // V^T (int8, fp8) or V (fp16 / bf16) tile
  // Shared memory (offsets from the base): Q, then per stage K and V^T (and, for mma.sync, the K
  // scales); the wgmma form keeps the scales of all stages after the last stage (1024-byte tiles).
  static constexpr int kStageBytes = kKTileBytes + kVTileBytes + (WG ? 0 : 4 * BN);
  static __device__ __forceinline__ int k_off(int slot) { return BM * kQB + slot * kStageBytes; }
  static __device__ __forceinline__ int v_off(int slot) { return k_off(slot) + kKTileBytes; }
  static __device__ __forceinline__ int scale_off(int slot) {
    return WG ? BM * kQB + STAGES * kStageBytes + slot * 4 * BN : k_off(slot) + kKTileBytes + kVTileBytes;
  }
  // Address of 16-byte chunk `chunk` of row `row` in the Q or K tile of ROWS rows at `tile` (see
  // kAtomBytes). Summed left to right as the d = 64 / 128 kernels always did (same code as before).
  template <int ROWS>
  static __device__ __forceinline__ u32 qk_addr(u32 tile, int row, int chunk) {
    if constexpr (kAtomChunks == 1) return tile + chunk * (ROWS * 16) + row * 16;   // S4, d = 96
    else if constexpr (kAtoms == 1) return tile + row * kQB + int8::swizzle<kDChunks>(row, chunk) * 16;
    else
      return tile + (chunk / kAtomChunks) * (ROWS * kAtomBytes) + row * kAtomBytes +
             int8::swizzle<kAtomChunks>(row, chunk % kAtomChunks) * 16;
  }

  // S accumulators. mma.sync form: biased (they start at kMagicBits, so the int32 reads as a float
  // with no conversion: sm_80's I2F is a quarter-rate op). wgmma form: raw (the first product ignores
  // the old values, so no per-tile initialisation) and converted with I2FP, which sm_90 runs at the
  // rate of plain ALU ops (so cheaper there than the biased start's extra initialisation).
  using Scores = int[kMT][kSN][4];
  // qk=int4 (INT4, either form) takes raw S too, zeroed before the first mma.sync and converted with
  // I2F: the biased start's -kMagic · k_scale bias rounds in fp32 by up to ~0.75 · k_scale, a code
  // product's worth of error that is nothing next to int8's 127² range but a third of a step with int4's
  // 7² (enough to push causal rows' LSE past the quantization's own bound).
  static constexpr bool kRawS = WG || INT4;
  using Logits = float[kMT][kSN][4];    // u = S · k_scale (KBLOCK: u = S, k_scale is in RowFac)
  using RowVals = float[kMT][2];        // one value per row: rows g and g + 8 of each m16 tile
  // Per row and 32-key step ps, the factor from u to the base-2 logit: q_scale · softmax_scale · log2 e
  // (st.qs), times the step's K scale with KBLOCK.
  using RowFac = float[kMT][2][kPVSteps];

  // Per-CTA addressing, resolved once.
  struct Ctx {
    const signed char* k;   // K of (b, h_kv)
    const signed char* v;   // V^T of (b, h_kv)
    const float* k_scale;   // K scales of (b, h_kv)
    long long k_ss, v_sc;
    int k_group, kv_len, q_len, causal_offset;
    bool check_lq;          // a row can reach the overflow guard (more than 30720 or 32768 keys)
    int row0;               // first query row of this warp
    const dev::u16* vh;     // pv=fp16: V (type OUT) of (b, h_kv), rows of v_ss elements
    long long v_ss;
    // TMA: the maps, and where (b, h_kv) starts in them: K's byte column and 16-key group, V^T's row.
    const TmaMap* k_map;
    const TmaMap* v_map;
    int k_col, k_group16, v_row;
  };

  // Per-warp running state; fully unrolled indexing keeps all of it in registers.
  struct State {
    u32 qf[kMT][kQKSteps][4];   // Q A-fragments, loaded once (mma.sync form only)
    // O: the P·V mma accumulators. int8: int32 in units of P̂ · V codes; fp16 / fp8: fp32 (in units
    // of P · V, resp. P̃ · V codes); accum=fp16: half2 pairs (row g, row g + 8 of each m16 tile).
    typename Pick<kHalfO, u32[kMT][kON][2], typename Pick<kIntPV, int[kMT][kON][4], float[kMT][kON][4]>::type>::type o;
    u32 l_q[kMT][2];            // this thread's share of Σ P̂ (not kept with the exact sum)
    float l_x[kMT][2];          // this thread's share of the same sum before rounding
    float r[kMT][2];            // reference max R
    float qs[kMT][2];           // q_scale · softmax_scale · log2(e)
    float dsf[kMT][2];          // QSMOOTH: scale of the row's block mean / q_scale (see Q smoothing)
  };

  // K rows are stored permuted: within every 32 keys, smem row 8j + n holds the key that S column n of
  // n8 block j must be, so that the S accumulator fragments of blocks (j0, j1) and (j2, j3) pack
  // directly into the m16n8k32 A fragment of P (4 consecutive keys per thread) while V^T keeps its
  // natural key order. Bits of the key offset w4..w0 map to smem row bits (w4, w1, w3, w2, w0).
  static __device__ __forceinline__ int k_smem_row(int r) {
    const int w = r & 31;
    return (r & ~31) | (w & 16) | ((w & 2) << 2) | ((w & 12) >> 1) | (w & 1);
  }

  // This thread's share of the tile loads: running pointers that advance one tile per load (tiles are
  // loaded in order), so nothing but the pointers stays live across the loop.
  struct Loader {
    const signed char* k;       // this thread's first K chunk of the next tile
    const signed char* v;       // this thread's first V^T chunk of the next tile
    long long k_pass, v_pass;   // bytes between this thread's consecutive K / V^T chunks
    int k_row;                  // key of this thread's first K chunk in the next tile
  };
  // One pass of the CTA covers kKRowStep K rows with kKLoads chunks per thread: 1 when the row's chunks
  // divide the threads, 3 at d = 96 (6 chunks per row: 64 rows per pass of 4 warps).
  static constexpr int kKLoads = kDChunks / gcd(kThreads, kDChunks);
  static constexpr int kKRowStep = kThreads / gcd(kThreads, kDChunks);
  static constexpr int kKPassBytes = kKRowStep * kAtomBytes;   // smem distance of a thread's rows in two passes
  // k_smem_row and the swizzle only permute the low 5 row bits, so for kKRowStep a multiple of 16 a
  // pass adds kKRowStep smem rows; at d = 256 with 4 warps (8 rows per pass) the row is permuted anew.
  static constexpr bool kKLinearPasses = kKRowStep % 16 == 0;
  static constexpr int kVRowStep = kThreads / kNChunks;   // V^T rows covered by one pass
  static constexpr int kKPasses = (BN + kKRowStep - 1) / kKRowStep;
  static constexpr int kVPasses = (D + kVRowStep - 1) / kVRowStep;

  static __device__ __forceinline__ Loader make_loader(const Ctx& cx) {
    const int tid = threadIdx.x;
    Loader ld;
    const int kr = tid / kDChunks, kc = tid % kDChunks;
    ld.k = cx.k + kr * cx.k_ss + kc * 16;
    ld.k_pass = kKRowStep * cx.k_ss;
    ld.k_row = kr;
    const int vr = tid / kNChunks, vc = tid % kNChunks;
    ld.v = cx.v + vr * cx.v_sc + vc * 16;
    ld.v_pass = kVRowStep * cx.v_sc;
    return ld;
  }

  // wgmma form with int8 P·V: tiles wholly inside kv_len (all but the last) skip the per-row bounds
  // checks (CHECKED = false: fewer instructions per tile). The other kernels keep one checked loader: the second
  // copy costs ptxas registers there (4 spill bytes: pv=fp16 accum=fp16 d 96 on sm_80, pv=fp8 two_level
  // d 64 on sm_90a at 4 blocks per SM).
  static __device__ __forceinline__ void load_kv_tile(const Ctx& cx, Loader& ld, u32 sbase, int slot, int k0) {
    if constexpr (TMA) {
      load_kv_tile_tma(cx, sbase, slot, k0);
    } else {
      if (WG && kIntPV && k0 + BN <= cx.kv_len) load_kv_tile<false>(cx, ld, sbase, slot, k0);
      else load_kv_tile<true>(cx, ld, sbase, slot, k0);
    }
  }

  // TMA (_tma): thread 0 issues the K and V^T boxes of the tile on the stage's mbarrier; the K scales
  // stay a cp.async per thread (zero past kv_len, as below). K rows past kv_len come in as they are
  // (the next head's rows, or zeros past the tensor): their scores are masked, and V^T is zero there.
  static constexpr u32 kTmaTileBytes = BN * kQB + D * BN;
  static constexpr int kBarOff = smem_bytes(D, BM, BN, STAGES, false, kVBytes, S4, QSMOOTH, QF != Gran::none);
  static __device__ __forceinline__ u32 stage_barrier(u32 sbase, int slot) { return sbase + kBarOff + 8 * slot; }
  static __device__ __forceinline__ void load_kv_tile_tma(const Ctx& cx, u32 sbase, int slot, int k0) {
    if (threadIdx.x == 0) {
      const u32 bar = stage_barrier(sbase, slot);
      dev::mbar_arrive_expect_tx(bar, kTmaTileBytes);
      dev::tma_load_5d(sbase + k_off(slot), cx.k_map, bar, cx.k_col, 0, 0, 0, cx.k_group16 + k0 / 16);
      dev::tma_load_2d(sbase + v_off(slot), cx.v_map, bar, k0, cx.v_row);
    }
    load_k_scales<true>(cx, sbase, slot, k0);
  }

  // The K scales of (b, h_kv). TMA: read from shared memory each tile (stored there at the start): at
  // the 128-register cap of the d 64 forms ptxas would otherwise spill the pointer (to local memory).
  static __device__ __forceinline__ u32 k_scales_slot(u32 sbase) { return stage_barrier(sbase, STAGES); }
  static __device__ __forceinline__ const float* k_scales(const Ctx& cx, u32 sbase) {
    if constexpr (TMA) {
      unsigned long long ptr;
      asm("ld.shared.u64 %0, [%1];" : "=l"(ptr) : "r"(k_scales_slot(sbase)));
      return reinterpret_cast<const float*>(ptr);
    } else {
      return cx.k_scale;
    }
  }

  template <bool CHECKED>
  static __device__ __forceinline__ void load_k_scales(const Ctx& cx, u32 sbase, int slot, int k0) {
    const int tid = threadIdx.x;
    if (tid < BN) {
      const int key = k0 + tid;
      const bool ok = !CHECKED || key < cx.kv_len;
      const int idx = cx.k_group == 1 ? key : (cx.k_group > 0 ? key / cx.k_group : 0);
      dev::cp_async_ca<4>(sbase + scale_off(slot) + 4 * tid, k_scales(cx, sbase) + (ok ? idx : 0), ok);
    }
  }
  template <bool CHECKED>
  static __device__ __forceinline__ void load_kv_tile(const Ctx& cx, Loader& ld, u32 sbase, int slot, int k0) {
    const int tid = threadIdx.x;
    const int kr0 = tid / kDChunks, kc0 = tid % kDChunks;   // the chunk ld.k points at
#pragma unroll
    for (int l = 0; l < kKLoads; ++l) {
      // Chunk l of this thread's pass: for l > 0 (d = 96) its offset from ld.k is recomputed per tile.
      const int kr = (tid + l * kThreads) / kDChunks, kc = (tid + l * kThreads) % kDChunks, ksr = k_smem_row(kr);
      const u32 k_smem = qk_addr<BN>(sbase + k_off(slot), ksr, kc);
      const signed char* ksrc = l == 0 ? ld.k : ld.k + (kr - kr0) * cx.k_ss + (kc - kc0) * 16;
      const int k_row = l == 0 ? ld.k_row : ld.k_row + kr - kr0;
#pragma unroll
      for (int it = 0; it < kKPasses; ++it) {
        if (BN % kKRowStep == 0 || kr + it * kKRowStep < BN) {
          // K is not padded: zero-fill past kv_len
          const bool ok = !CHECKED || k_row + it * kKRowStep < cx.kv_len;
          const u32 dst = kKLinearPasses ? k_smem + it * kKPassBytes
                                         : qk_addr<BN>(sbase + k_off(slot), k_smem_row(kr + it * kKRowStep), kc);
          dev::cp_async_16(dst, ok ? ksrc : ld.k, ok);
        }
        ksrc += ld.k_pass;
      }
    }
    if constexpr (kHalfV) {
      load_v_half(cx, sbase + v_off(slot), k0);
    } else {
      const int vr = tid / kNChunks, vc = tid % kNChunks;
      const u32 v_smem = sbase + v_off(slot) + vr * BN + int8::swizzle<kNChunks>(vr, vc) * 16;
      const signed char* vsrc = ld.v;
#pragma unroll
      for (int it = 0; it < kVPasses; ++it) {
        // V^T is zero-padded to kVPadTokens and bn divides it: always in bounds.
        if (D % kVRowStep == 0 || vr + it * kVRowStep < D) dev::cp_async_16(v_smem + it * kVRowStep * BN, vsrc, true);
        vsrc += ld.v_pass;
      }
    }
    load_k_scales<CHECKED>(cx, sbase, slot, k0);
    ld.k += BN * cx.k_ss;
    ld.v += BN;
    ld.k_row += BN;
  }

  // pv=fp16: the V tile as given (bn keys x d elements of type OUT, 16-byte chunks, zero past kv_len).
  // Key r goes to smem row k_smem_row(r), the row its S column has (see k_smem_row), so that P's k16
  // A fragments (S blocks 2i, 2i + 1 as they are) meet V rows 16i .. 16i + 15 in smem order; rows are
  // swizzled for conflict-free ldmatrix.trans (dev::swizzled_offset).
  static constexpr int kVHChunks = D / 8;   // 16-byte chunks per V row
  static __device__ __forceinline__ void load_v_half(const Ctx& cx, u32 vtile, int k0) {
    constexpr int kChunks = BN * kVHChunks;
    if constexpr (kThreads % kVHChunks == 0) {
      // A thread keeps its chunk column; its rows step by kRowStep, so one running pointer serves.
      constexpr int kRowStep = kThreads / kVHChunks;
      const int r0 = static_cast<int>(threadIdx.x) / kVHChunks, c = static_cast<int>(threadIdx.x) % kVHChunks;
      const dev::u16* src = cx.vh + (k0 + r0) * cx.v_ss + 8 * c;
      const long long step = kRowStep * cx.v_ss;
#pragma unroll
      for (int it = 0; it < BN / kRowStep; ++it) {
        const int r = r0 + it * kRowStep;
        const bool ok = k0 + r < cx.kv_len;
        dev::cp_async_16(vtile + dev::swizzled_offset<kVHChunks>(k_smem_row(r), c), ok ? src : cx.vh, ok);
        src += step;
      }
    } else {   // d = 96 (12 chunks per row)
#pragma unroll
      for (int it = 0; it < (kChunks + kThreads - 1) / kThreads; ++it) {
        const int i = it * kThreads + static_cast<int>(threadIdx.x);
        if (kChunks % kThreads == 0 || i < kChunks) {
          const int r = i / kVHChunks, c = i % kVHChunks, key = k0 + r;
          const bool ok = key < cx.kv_len;
          dev::cp_async_16(vtile + dev::swizzled_offset<kVHChunks>(k_smem_row(r), c),
                           cx.vh + (ok ? key * cx.v_ss + 8 * c : 0), ok);
        }
      }
    }
  }

  // This warp's Q A-fragments from the Q tile at sbase (mma.sync form).
  static __device__ __forceinline__ void load_q_fragments(u32 (&qf)[kMT][kQKSteps][4], u32 sbase) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int ks = 0; ks < kQKSteps; ++ks) {
        const int row = warp * 16 * kMT + 16 * mt + (lane & 15);
        const int chunk = 2 * ks + (lane >> 4);
        dev::ldmatrix_x4(qf[mt][ks], qk_addr<BM>(sbase, row, chunk));
      }
  }

  // S = Q̂·K̂^T of the K tile at ktile (biased or raw: see Scores).
  // qtile: this warpgroup's 64 Q rows (wgmma form only).
  // qtile: mma.sync form: the smem base (its Q tile), read when the Q fragments are not in registers.
  template <int NPS = kPVSteps>
  static __device__ __forceinline__ void qk(Scores& s, const State& st, u32 ktile, u32 qtile) {
    const int lane = threadIdx.x & 31;
    // Q fragments: a register copy of st.qf (free: fully unrolled), or reloaded from the Q tile.
    u32 qf[WG ? 1 : kMT][kQKSteps][4];
    if constexpr (!WG && kQInRegs) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int ks = 0; ks < kQKSteps; ++ks)
#pragma unroll
          for (int i = 0; i < 4; ++i) qf[mt][ks][i] = st.qf[mt][ks][i];
    } else if constexpr (!WG) {
      load_q_fragments(qf, qtile);
    }
    if constexpr (!WG) {   // the wgmma form's first product ignores the old values
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int j = 0; j < kSN; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][j][e] = kRawS ? 0 : int8::kMagicBits;
    }
    if constexpr (WG) {
      const dev::u64 qd = dev::wgmma_desc(qtile, kAtomBytes), kd = dev::wgmma_desc(ktile, kAtomBytes);
      // k-step ks reads the 32 bytes at 32 * (ks % kStepsPerAtom) of every row of atom ks / kStepsPerAtom
      // (descriptor addresses count 16-byte units).
      constexpr int kStepsPerAtom = kAtomBytes / 32;
      // NPS < kPVSteps: the first 32 * NPS keys only (their smem rows come first: k_smem_row permutes
      // within 32 keys), into the first 4 * NPS blocks of S.
      constexpr int kN = 32 * NPS;
      auto& sn = *reinterpret_cast<int(*)[kN / 8][4]>(&s[0][0][0]);
      dev::wgmma_fence();
      dev::wgmma_s8s8_ss<kN>(sn, qd, kd, 0);   // raw S (kRawS)
#pragma unroll
      for (int ks = 1; ks < kQKSteps; ++ks) {
        const int atom = ks / kStepsPerAtom, step = 2 * (ks % kStepsPerAtom);
        dev::wgmma_s8s8_ss<kN>(sn, qd + atom * (BM * kAtomBytes / 16) + step, kd + atom * (BN * kAtomBytes / 16) + step);
      }
      dev::wgmma_commit();   // the caller waits
    } else if constexpr (S4) {
      qk_s4(s, st, ktile);
    } else {
#pragma unroll
      for (int j = 0; j < kSN; ++j) {
#pragma unroll
        for (int h = 0; h < D / 64; ++h) {
          u32 kb[4];
          const int row = 8 * j + (lane & 7), chunk = 4 * h + (lane >> 3);
          dev::ldmatrix_x4(kb, qk_addr<BN>(ktile, row, chunk));
          const u32 b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            dev::mma_m16n8k32_s8_s32(s[mt][j], qf[mt][2 * h], b0);
            dev::mma_m16n8k32_s8_s32(s[mt][j], qf[mt][2 * h + 1], b1);
          }
        }
        if constexpr (D % 64 != 0) {   // d = 96: the last k32 step alone, from an x2 load (lanes 0-15)
          constexpr int ks = D / 32 - 1;
          u32 kb[2];
          const int row = 8 * j + (lane & 7), chunk = 2 * ks + ((lane >> 3) & 1);
          dev::ldmatrix_x2(kb, qk_addr<BN>(ktile, row, chunk));
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) dev::mma_m16n8k32_s8_s32(s[mt][j], qf[mt][ks], kb);
        }
      }
    }
  }

  // S4: S += Q̂·K̂^T on packed int4 rows of kQB bytes, one m16n8k64 .s4 mma per 32-byte step. K's
  // B fragments come as in the int8 path (x4: two steps; x2: one step); a trailing 16-byte half step
  // (d = 96) takes an x1 load and a zero upper register.
  static __device__ __forceinline__ void qk_s4(Scores& s, const State& st, u32 ktile) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < kSN; ++j) {
      const int row = 8 * j + (lane & 7);
#pragma unroll
      for (int h = 0; h < kQB / 64; ++h) {
        u32 kb[4];
        dev::ldmatrix_x4(kb, qk_addr<BN>(ktile, row, 4 * h + (lane >> 3)));
        const u32 b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          dev::mma_m16n8k64_s4_s32(s[mt][j], st.qf[mt][2 * h], b0);
          dev::mma_m16n8k64_s4_s32(s[mt][j], st.qf[mt][2 * h + 1], b1);
        }
      }
      if constexpr (kQB % 64 >= 32) {   // one whole step left (d = 64: the only one; d = 96: the first)
        constexpr int ks = kQB / 64 * 2;
        u32 kb[2];
        dev::ldmatrix_x2(kb, qk_addr<BN>(ktile, row, 2 * ks + ((lane >> 3) & 1)));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) dev::mma_m16n8k64_s4_s32(s[mt][j], st.qf[mt][ks], kb);
      }
      if constexpr (kQB % 32 != 0) {    // d = 96: the last 16 bytes (32 codes); the other half is zero
        constexpr int ks = kQKSteps - 1;
        u32 kb[1];
        dev::ldmatrix_x1(kb, qk_addr<BN>(ktile, row, 2 * ks));
        const u32 b[2] = {kb[0], 0u};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) dev::mma_m16n8k64_s4_s32(s[mt][j], st.qf[mt][ks], b);
      }
    }
  }

  // S4: this warp's Q A-fragments from the packed Q tile; the half step of d = 96 loads its lower
  // 16 bytes (x2: rows 0-7 and 8-15) and zeroes the upper two registers.
  static __device__ __forceinline__ void load_q_s4(State& st, u32 sbase) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const int row = warp * 16 * kMT + 16 * mt + (lane & 15);
#pragma unroll
      for (int ks = 0; ks < kQB / 32; ++ks) dev::ldmatrix_x4(st.qf[mt][ks], qk_addr<BM>(sbase, row, 2 * ks + (lane >> 4)));
      if constexpr (kQB % 32 != 0) {
        constexpr int ks = kQKSteps - 1;
        u32 qa[2];
        dev::ldmatrix_x2(qa, qk_addr<BM>(sbase, row, 2 * ks));
        st.qf[mt][ks][0] = qa[0];
        st.qf[mt][ks][1] = qa[1];
        st.qf[mt][ks][2] = 0u;
        st.qf[mt][ks][3] = 0u;
      }
    }
  }

  // u = S · k_scale (masked keys: -inf) and the tile max of L per row. Returns whether R must rise.
  // QSMOOTH: ds = the staged ΔS · k_scale of the CTA's block means (block_mean_scores), added to u
  // (times the row's dsf) before the max.
  template <bool MASKED, int NPS = kPVSteps>
  static __device__ __forceinline__ bool logits(Logits& u, RowVals& m_tile, RowFac& fac, const Scores& s,
                                                const State& st, const Ctx& cx, const float* kscale, int k0,
                                                const float* ds) {
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t4 = lane & 3;
    // Last key each row may see (kv_len - 1, or its causal limit), relative to this thread's first key.
    int last[kMT][2];
    if (MASKED) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int row_last = cx.row0 + 16 * mt + g + 8 * hf + cx.causal_offset;
          last[mt][hf] = (CAUSAL && row_last < cx.kv_len - 1 ? row_last : cx.kv_len - 1) - (k0 + 4 * t4);
        }
    }
    // Thread columns of k-step ps are keys 32ps + 4t4 + 0..3 (blocks j0, j1) and 32ps + 16 + 4t4 + 0..3
    // (blocks j2, j3): two float4 reads of the staged scales. KBLOCK: the step's 32 keys share one scale
    // (K groups of 64 keys, and tiles start at multiples of bn >= 32), which goes into the row factor
    // instead of every score: one multiply per row and step rather than one per score. A step wholly
    // past kv_len reads a zero-filled scale; the clamp keeps -inf · factor at -inf.
    float kstep[kPVSteps];
#pragma unroll
    for (int ps = 0; ps < NPS; ++ps) {
      kstep[ps] = KBLOCK ? fmaxf(kscale[32 * ps], 1e-30f) : 1.f;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) fac[mt][hf][ps] = KBLOCK ? st.qs[mt][hf] * kstep[ps] : 0.f;   // unused without
    }
#pragma unroll
    for (int ps = 0; ps < NPS; ++ps) {
      float4 lo = make_float4(1.f, 1.f, 1.f, 1.f), hi = lo;
      if constexpr (!KBLOCK) {
        lo = *reinterpret_cast<const float4*>(kscale + 32 * ps + 4 * t4);
        hi = *reinterpret_cast<const float4*>(kscale + 32 * ps + 16 + 4 * t4);
      }
      const float ksc[4][2] = {{lo.x, lo.y}, {lo.z, lo.w}, {hi.x, hi.y}, {hi.z, hi.w}};
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        // The same two keys of ΔS, from the row block of each m16 tile (its 16 rows lie in one block);
        // a float2 per block jj rather than float4s per k-step keeps fewer registers live (spills).
        float2 dsk[kMT];
        if constexpr (QSMOOTH) {
          const int warp = threadIdx.x >> 5;
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
            dsk[mt] = *reinterpret_cast<const float2*>(ds + ((warp * 16 * kMT + 16 * mt) / kQMeanBlock) * BN + 32 * ps +
                                                       16 * (jj >> 1) + 2 * (jj & 1) + 4 * t4);
        }
        const float kbias[2] = {-int8::kMagic * ksc[jj][0], -int8::kMagic * ksc[jj][1]};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float x;
            if constexpr (KBLOCK)   // S itself (the biased start: its float bits minus the bias, exact)
              x = kRawS ? int8::i2f(s[mt][4 * ps + jj][e]) : __int_as_float(s[mt][4 * ps + jj][e]) - int8::kMagic;
            else
              x = kRawS ? int8::i2f(s[mt][4 * ps + jj][e]) * ksc[jj][e & 1]
                        : fmaf(__int_as_float(s[mt][4 * ps + jj][e]), ksc[jj][e & 1], kbias[e & 1]);
            if constexpr (QSMOOTH) x = fmaf((e & 1) ? dsk[mt].y : dsk[mt].x, st.dsf[mt][e >> 1], x);
            if (MASKED && 32 * ps + 16 * (jj >> 1) + 2 * (jj & 1) + (e & 1) > last[mt][e >> 1]) x = dev::neg_inf();
            u[mt][4 * ps + jj][e] = x;
          }
      }
    }
    bool raise = false;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float mx[kSN];   // a tree, not a chain: the max is on the critical path of every tile
#pragma unroll
        for (int j = 0; j < 4 * NPS; ++j) mx[j] = fmaxf(u[mt][j][2 * hf], u[mt][j][2 * hf + 1]);
        // KBLOCK: first within each step (4 blocks), which then takes its K scale, then across steps.
#pragma unroll
        for (int w = 1; w < (KBLOCK ? 4 : 4 * NPS); w *= 2)
#pragma unroll
          for (int j = 0; j + w < 4 * NPS; j += 2 * w) mx[j] = fmaxf(mx[j], mx[j + w]);
        if constexpr (KBLOCK) {
#pragma unroll
          for (int ps = 0; ps < NPS; ++ps) mx[4 * ps] *= kstep[ps];   // > 0: -inf stays -inf
#pragma unroll
          for (int w = 4; w < 4 * NPS; w *= 2)
#pragma unroll
            for (int j = 0; j + w < 4 * NPS; j += 2 * w) mx[j] = fmaxf(mx[j], mx[j + w]);
        }
        m_tile[mt][hf] = dev::quad_max(mx[0]) * st.qs[mt][hf];   // qs > 0: -inf stays -inf
        raise |= m_tile[mt][hf] > st.r[mt][hf];
      }
    // The guards apart from the max test: they rarely apply (cx.check_lq is uniform, false up to ~31k
    // keys), and folded into its expression they cost every tile a chain of selects.
    if (cx.check_lq) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) raise |= long_row_share(st, mt, 0) || long_row_share(st, mt, 1);
    }
    if constexpr (kHalfO) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) raise |= st.l_x[mt][0] > kHalfLShare || st.l_x[mt][1] > kHalfLShare;
    }
    return raise;
  }

  // Raises R of the rows whose tile max exceeds it, or whose Σ P̂ grew large, by whole steps k and
  // divides O and l by 2^k. The first keys of a row set R to their max (+ kHeadroom).
  // The work is per warp (any of its rows); within it, each half of the rows (hf) skips the O shifts
  // when none of its 8 rows rises, and the long-row guard (two shuffles) runs only where a row's sum
  // can reach it at all (cx.check_lq).
  static __device__ __forceinline__ void raise_reference(State& st, const RowVals& m_tile, const Ctx& cx) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        // The row's largest share decides (the guard), so its 4 threads agree.
        bool halve = false;
        if (cx.check_lq) {
          if constexpr (kExactSum) {
            float lx = st.l_x[mt][hf];
            lx = fmaxf(lx, __shfl_xor_sync(0xffffffffu, lx, 1));
            lx = fmaxf(lx, __shfl_xor_sync(0xffffffffu, lx, 2));
            halve = lx > kLxRescale;
          } else {
            u32 lq = st.l_q[mt][hf];
            u32 other = dev::shfl_xor(lq, 1);
            lq = lq > other ? lq : other;
            other = dev::shfl_xor(lq, 2);
            lq = lq > other ? lq : other;
            halve = lq > kLRescale;
          }
        }
        const float r_old = st.r[mt][hf], m = m_tile[mt][hf];
        int k = 0;
        float r_new = r_old;
        if (m > r_old) {
          if constexpr (WG) {
            // The steps as a biased float (ceil_biased) rather than FRND.CEIL and F2I: two conversions
            // (the pipe of the exponentials) and an add fewer in most tiles of a short row, where the
            // raises are frequent. The
            // mma.sync form keeps the code below: this one costs it 4 bytes of spills on sm_89 (d 64,
            // smooth=qk / qkv).
            const float d = plus_headroom(m - r_old);   // +inf while O and l are still 0 (r_old = -inf)
            if (d > 64.f) {   // R becomes the max: O >> 64 is nothing, so R needs no whole step
              k = r_old == dev::neg_inf() ? 0 : 64;
              r_new = plus_headroom(m);
            } else {
              const float biased = ceil_biased(d);
              k = __float_as_int(biased) - int8::kMagicBits;
              r_new = r_old + (biased - int8::kMagic);
            }
          } else if (r_old == dev::neg_inf()) {
            r_new = m + kHeadroom;   // O and l are still 0
          } else {
            const float steps = ceilf(m - r_old + kHeadroom);
            k = steps < 64.f ? static_cast<int>(steps) : 64;
            r_new = r_old + steps;
          }
        }
        if (halve) {
          k += 1;
          r_new += 1.f;
        }
        if constexpr (kHalfO) {   // the row's largest share decides, so its 4 threads agree
          float lx = fmaxf(st.l_x[mt][hf], __shfl_xor_sync(0xffffffffu, st.l_x[mt][hf], 1));
          lx = fmaxf(lx, __shfl_xor_sync(0xffffffffu, lx, 2));
          if (lx > kHalfLShare) {
            k += 1;
            r_new += 1.f;
          }
        }
        st.r[mt][hf] = r_new;
        if (!__any_sync(0xffffffffu, k != 0)) continue;
        if constexpr (kIntPV) {
#pragma unroll
          for (int n = 0; n < kON; ++n)
#pragma unroll
            for (int e = 2 * hf; e < 2 * hf + 2; ++e) st.o[mt][n][e] = int8::shift_floor(st.o[mt][n][e], k);
        } else {
          scale_o(st, mt, hf, k);
        }
        if constexpr (!kExactSum) st.l_q[mt][hf] = int8::shift_floor(st.l_q[mt][hf], k);
        st.l_x[mt][hf] *= pow2_neg(k);
      }
  }

  // x + kHeadroom, with no add when it is 0 (x + 0.f is an add: x may be -0).
  static __device__ __forceinline__ float plus_headroom(float x) { return kHeadroom != 0.f ? x + kHeadroom : x; }

  // 1.5 * 2^23 + ceil(x) for x in [0, 64], without a conversion instruction: the sum is rounded up at a
  // spacing of 1, so its float bits minus the bias's are ceil(x) as an int, and its value minus the
  // bias is ceil(x) as a float (both exact).
  static __device__ __forceinline__ float ceil_biased(float x) {
    float y;
    asm("add.rp.f32 %0, %1, %2;" : "=f"(y) : "f"(x), "f"(int8::kMagic));
    return y;
  }

  // Whether this thread's share of row half hf's sum passed the overflow guard (long rows only).
  static __device__ __forceinline__ bool long_row_share(const State& st, int mt, int hf) {
    if constexpr (kExactSum) return st.l_x[mt][hf] > kLxRescale;
    else return st.l_q[mt][hf] > kLRescale;
  }

  // 2^-k from its exponent bits (k <= 65 here: a raise is clamped to 64 steps, plus one halving).
  static __device__ __forceinline__ float pow2_neg(int k) { return __int_as_float((127 - k) << 23); }

  // Float O (pv=fp16 / fp8): O *= 2^-k for rows g + 8hf of m16 tile mt. Powers of two: exact (a
  // product under the format's smallest normal loses low bits, irrelevant next to the new max).
  static __device__ __forceinline__ void scale_o(State& st, int mt, int hf, int k) {
    const float f = pow2_neg(k);
    if constexpr (kHalfO) {
      const u32 f2 = dev::pack_half2(f, f);
#pragma unroll
      for (int n = 0; n < kON; ++n) st.o[mt][n][hf] = hmul2(st.o[mt][n][hf], f2);
    } else {
#pragma unroll
      for (int n = 0; n < kON; ++n)
#pragma unroll
        for (int e = 2 * hf; e < 2 * hf + 2; ++e) st.o[mt][n][e] *= f;
    }
  }
  static __device__ __forceinline__ u32 hmul2(u32 a, u32 b) {
    u32 d;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
  }

  // pv=fp16 and pv=fp8e4m3: P = pscale · 2^(L - R) in registers, the exact row sums (fp32, before any
  // rounding), and O += P·V with the V tile at vtile.
  //   fp16: P rounded to OUT (fp16 or bf16: the type of V, which the loader copies as is), k16 A
  //         fragments straight from the S accumulators (blocks 2i, 2i + 1); V fragments by ldmatrix.trans
  //         from the row-major tile (rows in S column order, see load_v_half); mma m16n8k16 into fp32
  //         or, with accum=fp16, half2 O.
  //   fp8:  P̃ = 448 · 2^(L - R) to e4m3 (RNE, saturating), packed exactly like the int8 P̂ bytes (same
  //         k32 A fragment), V^T e4m3 codes from the same swizzled tile as int8 V̂^T; mma m16n8k32
  //         .e4m3 into fp32 O (accum=fp32: the hardware's ~FP22 accumulate over the whole row), or into
  //         a zeroed accumulator per (8 channels, KV tile) added to O after the tile (two_level).
  template <int NPS = kPVSteps>
  static __device__ __forceinline__ void softmax_pv_float(State& st, const Logits& u, const RowFac& fac, u32 vtile) {
    const int lane = threadIdx.x & 31;
    constexpr float kLog2Scale = kHalfV ? 0.f : kLog2Fp8PScale;
    float y[kMT][kSN][4];   // P (before rounding), in S accumulator order
    u32 ph[kHalfV ? kMT : 1][BN / 16][4];   // fp16: P's k16 A fragments (S blocks 2ks, 2ks + 1 as they are)
    u32 pf[kHalfV ? 1 : kMT][kPVSteps][4];  // fp8: P̃'s k32 A fragments
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      float pbias[2], lsum[2] = {0.f, 0.f};
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)   // R = -inf only while every key so far is masked (u = -inf)
        pbias[hf] = st.r[mt][hf] == dev::neg_inf() ? 0.f : kLog2Scale - st.r[mt][hf];
#pragma unroll
      for (int j = 0; j < 4 * NPS; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          y[mt][j][e] = dev::exp2_approx(fmaf(u[mt][j][e], KBLOCK ? fac[mt][e >> 1][j / 4] : st.qs[mt][e >> 1], pbias[e >> 1]));
          lsum[e >> 1] += y[mt][j][e];
        }
      st.l_x[mt][0] += lsum[0];
      st.l_x[mt][1] += lsum[1];
      if constexpr (kHalfV) {   // packed at once, so y dies here (fewer live registers than y)
#pragma unroll
        for (int ks = 0; ks < BN / 16; ++ks) {
          const float(&a)[4] = y[mt][2 * ks];
          const float(&b)[4] = y[mt][2 * ks + 1];
          ph[mt][ks][0] = dev::pack2<OUT>(a[0], a[1]);
          ph[mt][ks][1] = dev::pack2<OUT>(a[2], a[3]);
          ph[mt][ks][2] = dev::pack2<OUT>(b[0], b[1]);
          ph[mt][ks][3] = dev::pack2<OUT>(b[2], b[3]);
        }
      } else {
        // fp8: keys 4t4 .. +3 = (j0 e0, j0 e1, j1 e0, j1 e1) for rows g / g + 8, then blocks j2, j3:
        // the int8 P̂ byte order (the same k32 A fragment).
#pragma unroll
        for (int ks = 0; ks < NPS; ++ks) {
          const float(&j0)[4] = y[mt][4 * ks];
          const float(&j1)[4] = y[mt][4 * ks + 1];
          const float(&j2)[4] = y[mt][4 * ks + 2];
          const float(&j3)[4] = y[mt][4 * ks + 3];
          pf[mt][ks][0] = dev::e4m3x4(j0[0], j0[1], j1[0], j1[1]);
          pf[mt][ks][1] = dev::e4m3x4(j0[2], j0[3], j1[2], j1[3]);
          pf[mt][ks][2] = dev::e4m3x4(j2[0], j2[1], j3[0], j3[1]);
          pf[mt][ks][3] = dev::e4m3x4(j2[2], j2[3], j3[2], j3[3]);
        }
      }
    }
    if constexpr (kHalfV) {
#pragma unroll
      for (int c = 0; c < D / 16; ++c) {
#pragma unroll
        for (int ks = 0; ks < BN / 16; ++ks) {
          u32 vb[4];
          const int row = 16 * ks + (lane & 7) + (((lane >> 3) & 1) << 3), chunk = 2 * c + (lane >> 4);
          dev::ldmatrix_x4_trans(vb, vtile + dev::swizzled_offset<kVHChunks>(row, chunk));
          const u32 b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            if constexpr (kHalfO) {
              dev::mma_m16n8k16_f16_f16(st.o[mt][2 * c], ph[mt][ks], b0);
              dev::mma_m16n8k16_f16_f16(st.o[mt][2 * c + 1], ph[mt][ks], b1);
            } else {
              dev::mma_m16n8k16_f32<OUT>(st.o[mt][2 * c], ph[mt][ks], b0);
              dev::mma_m16n8k16_f32<OUT>(st.o[mt][2 * c + 1], ph[mt][ks], b1);
            }
          }
        }
      }
    } else if constexpr (WG) {
      pv_fp8_wgmma<NPS>(st, pf, vtile);
    } else {
      // One n8 block of O at a time (x2 V loads): two_level's fresh accumulator is then 4 registers per
      // m16 tile (and this order also keeps fp32 at d = 256 on sm_90a from spilling, per ptxas's report).
#pragma unroll
      for (int n = 0; n < kON; ++n) {
        float t[kMT][4];
        if constexpr (ACC == Accum::two_level) {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e) t[mt][e] = 0.f;
        }
#pragma unroll
        for (int ks = 0; ks < NPS; ++ks) {
          u32 vb[2];
          const int row = 8 * n + (lane & 7), chunk = 2 * ks + ((lane >> 3) & 1);
          dev::ldmatrix_x2(vb, vtile + row * BN + int8::swizzle<kNChunks>(row, chunk) * 16);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            if constexpr (ACC == Accum::two_level) dev::mma_m16n8k32_e4m3_f32(t[mt], pf[mt][ks], vb);
            else dev::mma_m16n8k32_e4m3_f32(st.o[mt][n], pf[mt][ks], vb);
          }
        }
        if constexpr (ACC == Accum::two_level) {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e) st.o[mt][n][e] += t[mt][e];
        }
      }
    }
  }

  // fp8 P·V on wgmma (sm_90a: native e4m3 tensor cores, where mma.sync .e4m3 becomes FP16 conversions
  // and HMMA). P̃ from registers (pf: the same k32 A fragment as int8 P̂), V^T from the swizzled tile.
  //   accum=fp32       straight into O. Hopper's FP8 wgmma accumulates with reduced precision (the
  //                    SageAttention2 / DeepSeek-V3 observation), so a long row's O loses low bits.
  //   accum=two_level  a fresh accumulator per KV tile (SCALE_D = 0 on the first k-step), waited for
  //                    and added to the fp32 O: the reduced-precision sums cover bn keys only. At d = 256
  //                    the fresh sum is taken in two halves of 128 columns (128 more registers would spill).
  static constexpr int kTwoLevelCols = D == 256 ? 128 : D;
  template <int NPS = kPVSteps>
  static __device__ __forceinline__ void pv_fp8_wgmma(State& st, const u32 (&pf)[1][kPVSteps][4], u32 vtile) {
    const dev::u64 vd = dev::wgmma_desc(vtile, BN);
    if constexpr (ACC == Accum::two_level) {
#pragma unroll
      for (int c = 0; c < D / kTwoLevelCols; ++c) {
        float t[kTwoLevelCols / 8][4];
        const dev::u64 vc = vd + static_cast<dev::u64>((c * kTwoLevelCols * BN) >> 4);   // V^T rows BN bytes apart
        dev::wgmma_fence();
        dev::wgmma_e4m3_rs<kTwoLevelCols, 0>(t, pf[0][0], vc, BN);
#pragma unroll
        for (int ps = 1; ps < NPS; ++ps) dev::wgmma_e4m3_rs<kTwoLevelCols>(t, pf[0][ps], vc + 2 * ps, BN);
        dev::wgmma_commit();
        dev::wgmma_wait<0>();
        dev::fence_operands(t);
#pragma unroll
        for (int n = 0; n < kTwoLevelCols / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) st.o[0][c * (kTwoLevelCols / 8) + n][e] += t[n][e];
      }
    } else {
      dev::fence_operands(st.o[0]);
      dev::wgmma_fence();
#pragma unroll
      for (int ps = 0; ps < NPS; ++ps) dev::wgmma_e4m3_rs<D>(st.o[0], pf[0][ps], vd + 2 * ps, BN);
      dev::wgmma_commit();   // the caller waits
    }
  }

  // O's two values (columns 2t4, 2t4 + 1) of row g + 8hf in n8 block n of m16 tile mt, as floats.
  static __device__ __forceinline__ float2 o_pair(const State& st, int mt, int n, int hf) {
    if constexpr (kHalfO) {
      float lo, hi;
      dev::unpack_half2(st.o[mt][n][hf], lo, hi);
      return make_float2(lo, hi);
    } else if constexpr (kIntPV) {
      return make_float2(int8::i2f(st.o[mt][n][2 * hf]), int8::i2f(st.o[mt][n][2 * hf + 1]));
    } else {
      return make_float2(st.o[mt][n][2 * hf], st.o[mt][n][2 * hf + 1]);
    }
  }

  // P from the logits and O += P·V with the V tile at vtile, by P·V format.
  template <int NPS = kPVSteps>
  static __device__ __forceinline__ void softmax_pv(State& st, const Logits& u, const RowFac& fac, u32 vtile) {
    static_assert(NPS == kPVSteps || (WG && !kHalfV), "prefill_int8: a half KV tile exists in the wgmma form only");
    if constexpr (kIntPV) softmax_pv_int8<NPS>(st, u, fac, vtile);
    else softmax_pv_float<NPS>(st, u, fac, vtile);
  }

  // P̂ = round(kPScale · 2^(L - R)) packed straight into the A fragments of P·V, the row sums (the exact
  // one always; Σ P̂ where it is l), and O += P̂·V̂ with the V^T tile at vtile.
  template <int NPS = kPVSteps>
  static __device__ __forceinline__ void softmax_pv_int8(State& st, const Logits& u, const RowFac& fac, u32 vtile) {
    const int lane = threadIdx.x & 31;
    u32 pf[kMT][kPVSteps][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      float pbias[2];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)   // R = -inf only while every key so far is masked (u = -inf)
        pbias[hf] = st.r[mt][hf] == dev::neg_inf() ? 0.f : kLog2PScale - st.r[mt][hf];
      // The exact sums add the fp16 copies of y that the rounding makes anyway: one HADD2 per two
      // probabilities (each fp16 lane sums bn / 8 values below 255: relative error <= ~1e-3).
      u32 hsum[2] = {0u, 0u};
#pragma unroll
      for (int ps = 0; ps < NPS; ++ps) {
        float y[4][4];
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            y[jj][e] = dev::exp2_approx(
                fmaf(u[mt][4 * ps + jj][e], KBLOCK ? fac[mt][e >> 1][ps] : st.qs[mt][e >> 1], pbias[e >> 1]));
        // h[jj][hf]: (y of row g + 8hf, key pair of block jj) in fp16; the A fragment wants
        // reg0 = row g, keys 4t4..+3 = (j0 e0, j0 e1, j1 e0, j1 e1); reg1 = row g + 8;
        // reg2 / reg3 = the same for blocks j2, j3 (keys 16 + 4t4..+3).
        u32 h[4][2];
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            h[jj][hf] = dev::pack_half2(y[jj][2 * hf], y[jj][2 * hf + 1]);
            hsum[hf] = int8::hadd2(hsum[hf], h[jj][hf]);
          }
        pf[mt][ps][0] = int8::pack_even_bytes(int8::round_f16x2(h[0][0]), int8::round_f16x2(h[1][0]));
        pf[mt][ps][1] = int8::pack_even_bytes(int8::round_f16x2(h[0][1]), int8::round_f16x2(h[1][1]));
        pf[mt][ps][2] = int8::pack_even_bytes(int8::round_f16x2(h[2][0]), int8::round_f16x2(h[3][0]));
        pf[mt][ps][3] = int8::pack_even_bytes(int8::round_f16x2(h[2][1]), int8::round_f16x2(h[3][1]));
      }
      if constexpr (!kExactSum) {
#pragma unroll
        for (int ps = 0; ps < NPS; ++ps) {
          st.l_q[mt][0] = int8::byte_sum(pf[mt][ps][0], int8::byte_sum(pf[mt][ps][2], st.l_q[mt][0]));
          st.l_q[mt][1] = int8::byte_sum(pf[mt][ps][1], int8::byte_sum(pf[mt][ps][3], st.l_q[mt][1]));
        }
      }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float lo, hi;
        dev::unpack_half2(hsum[hf], lo, hi);
        st.l_x[mt][hf] += lo + hi;
      }
    }
    if constexpr (WG) {
      const dev::u64 vd = dev::wgmma_desc(vtile, BN);
      dev::fence_operands(st.o[0]);
      dev::wgmma_fence();
#pragma unroll
      for (int ps = 0; ps < NPS; ++ps) dev::wgmma_u8s8_rs<D>(st.o[0], pf[0][ps], vd + 2 * ps, BN);
      dev::wgmma_commit();   // the caller waits
    } else {
#pragma unroll
      for (int c = 0; c < D / 16; ++c) {
#pragma unroll
        for (int ps = 0; ps < NPS; ++ps) {
          u32 vb[4];
          const int row = 16 * c + (lane & 7) + ((lane >> 4) << 3);
          const int chunk = 2 * ps + ((lane >> 3) & 1);
          dev::ldmatrix_x4(vb, vtile + row * BN + int8::swizzle<kNChunks>(row, chunk) * 16);
          const u32 b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            dev::mma_m16n8k32_u8s8_s32(st.o[mt][2 * c], pf[mt][ps], b0);
            dev::mma_m16n8k32_u8s8_s32(st.o[mt][2 * c + 1], pf[mt][ps], b1);
          }
        }
      }
    }
  }


  // ---- Q smoothing (QSMOOTH; see "Q smoothing" at the top) ----
  // Shared memory after everything else (qsmooth_bytes in prefill_int8_shape.h):
  //   kMeanFragOff:  the m16n8k32 A fragments of the block means, [kQKSteps][32 lanes] x 4 u32: row g < kQBlocks
  //                  holds the high codes of block g, row 8 + g its low codes, the other rows zero;
  //   kDsOff:        ΔS · k_scale of the current KV tile, [kQBlocks][BN] fp32, keys in natural order;
  //   kMeanScaleOff: the scale of each block mean's high codes, [8] fp32.
  static constexpr int kQBlocks = BM / kQMeanBlock;   // 1 .. 4 block means per CTA
  static constexpr int kMeanFragOff = smem_bytes(D, BM, BN, STAGES, WG, kVBytes, S4);
  static constexpr int kDsOff = kMeanFragOff + 16 * D;
  static constexpr int kMeanScaleOff = kDsOff + 4 * kQBlocks * BN;
  // The low codes carry the rounding residual of the high codes in units of 1/kMeanLowScale high codes.
  static constexpr float kMeanLowScale = 254.f;

  // Packs 4 floats, already in code units and within [-127.5, 127.5], into 4 int8 codes (round to
  // nearest even, as the quantizer does).
  static __device__ __forceinline__ u32 pack_codes(float a, float b, float c, float d) {
    auto byte = [](float x) { return static_cast<u32>(__float2int_rn(fminf(fmaxf(x, -127.f), 127.f)) & 0xff); };
    return byte(a) | (byte(b) << 8) | (byte(c) << 16) | (byte(d) << 24);
  }

  // Quantizes this CTA's block means (p.q_mean) into the A fragments in shared memory, two int8 codes
  // per value: hi = round(m / s) with s = amax / 127, lo = round((m / s - hi) · kMeanLowScale), so
  // m ≈ s · (hi + lo / kMeanLowScale) to ~1/64000 of amax: the mean is shared by the 64 rows of its block,
  // so its rounding error would repeat in each of them, and the otherwise idle rows 8 .. 15 of the m16
  // tile carry lo for free. Warp w fills fragment row w (and w + WARPS); rows past kQBlocks or past
  // q_len are zero. The caller's barrier publishes it.
  static __device__ void prepare_block_means(const AttentionParams& p, char* smem, int b, int h, int q0) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    u32* frag = reinterpret_cast<u32*>(smem + kMeanFragOff);
    float* mscale = reinterpret_cast<float*>(smem + kMeanScaleOff);
    const int n_blocks = (p.q_len + kQMeanBlock - 1) / kQMeanBlock;
    for (int g = warp; g < 8; g += WARPS) {
      const int blk = q0 / kQMeanBlock + g;
      const bool live = g < kQBlocks && blk < n_blocks;
      const float* mean = p.q_mean + ((static_cast<long long>(b) * p.heads_q + h) * n_blocks + (live ? blk : 0)) * D;
      float amax = 0.f;
      if (live)
        for (int c = lane; c < D; c += 32) amax = fmaxf(amax, fabsf(mean[c]));
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, dev::shfl_xor(amax, off));
      const float inv = amax > 0.f ? 127.f / amax : 0.f;
      if (lane == 0) mscale[g] = amax / 127.f;
      // Word w holds channels 4w .. 4w + 3: k-step w / 8, bytes 16 · ((w % 8) / 4) + 4 · (w % 4) of it,
      // which is register 2 · half (+1 for the low codes) of lane 4g + w % 4.
      for (int w = lane; w < D / 4; w += 32) {
        u32 hi = 0u, lo = 0u;
        if (live) {
          const float4 m = *reinterpret_cast<const float4*>(mean + 4 * w);
          const float x[4] = {m.x * inv, m.y * inv, m.z * inv, m.w * inv};
          float r[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) r[i] = (x[i] - rintf(x[i])) * kMeanLowScale;
          hi = pack_codes(x[0], x[1], x[2], x[3]);
          lo = pack_codes(r[0], r[1], r[2], r[3]);
        }
        const int ks = w / 8, half = (w % 8) / 4, t4 = w % 4;
        u32* dst = frag + (ks * 32 + 4 * g + t4) * 4 + 2 * half;
        dst[0] = hi;   // a0 / a2: row g
        dst[1] = lo;   // a1 / a3: row g + 8
      }
    }
  }

  // Per row: the factor from staged ΔS · k_scale (units of high mean codes x K codes x k_scale) to u's
  // units (Q codes x K codes x k_scale), i.e. mscale / q_scale. A row whose smoothed codes are all zero
  // (q_scale 0: a row equal to its block mean, as a block of one row) takes mscale as its q_scale:
  // its S is 0 whatever the scale, and the logits stay u · qs. After the barrier after prepare_block_means.
  static __device__ void init_block_mean_factors(State& st, const AttentionParams& p, const char* smem,
                                                 const float* qscale, int q0) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float* mscale = reinterpret_cast<const float*>(smem + kMeanScaleOff);
    const float qmul = p.softmax_scale * dev::kLog2e;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = warp * 16 * kMT + 16 * mt + (lane >> 2) + 8 * hf, row = q0 + r;
        const float ms = mscale[r / kQMeanBlock];
        float w = 0.f;
        if (row < p.q_len) w = qscale[p.q_scale.group > 0 ? row / p.q_scale.group : 0];
        if (!(w > 0.f)) w = ms;
        st.dsf[mt][hf] = w > 0.f && row < p.q_len ? ms / w : 0.f;
        if (row < p.q_len) st.qs[mt][hf] = fmaxf(w * qmul, 1e-30f);
      }
  }

  // ΔS of the K tile in `slot` for every block mean: one m16 x bn product (rows g: high codes, 8 + g:
  // low codes), split over the warps by n8 column blocks (warp w: blocks w, w + WARPS, ...), combined
  // and scaled by k_scale, stored for logits() to read. K is read with the same ldmatrix rows as qk(),
  // so column 2t4 + e of block j is the key logits() maps it to. The caller's barrier publishes it.
  // INT4 K (m16n8k64 .s4): the means would need 4-bit A codes; two mmas (hi and lo nibble rows, or a
  // third level) instead of the one here would keep the mean's precision.
  static __device__ void block_mean_scores(char* smem, u32 sbase, int slot) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const uint4* frag = reinterpret_cast<const uint4*>(smem + kMeanFragOff);
    const float* kscale = reinterpret_cast<const float*>(smem + scale_off(slot));
    float* ds = reinterpret_cast<float*>(smem + kDsOff);
    const u32 ktile = sbase + k_off(slot);
#pragma unroll
    for (int j = warp; j < kSN; j += WARPS) {
      int c[4] = {0, 0, 0, 0};
#pragma unroll
      for (int ks = 0; ks < kQKSteps; ++ks) {
        const uint4 a = frag[ks * 32 + lane];
        const u32 af[4] = {a.x, a.y, a.z, a.w};
        u32 kb[2];
        dev::ldmatrix_x2(kb, qk_addr<BN>(ktile, 8 * j + (lane & 7), 2 * ks + ((lane >> 3) & 1)));
        dev::mma_m16n8k32_s8_s32(c, af, kb);
      }
      if (g < kQBlocks) {
        const int key = 32 * (j / 4) + 16 * ((j & 3) >> 1) + 2 * (j & 1) + 4 * t4;
        const float2 ksc = *reinterpret_cast<const float2*>(kscale + key);
        const float x0 = static_cast<float>(c[0]) + static_cast<float>(c[2]) * (1.f / kMeanLowScale);
        const float x1 = static_cast<float>(c[1]) + static_cast<float>(c[3]) * (1.f / kMeanLowScale);
        *reinterpret_cast<float2*>(ds + g * BN + key) = make_float2(x0 * ksc.x, x1 * ksc.y);
      }
    }
  }

  // One KV tile, resident in stage buffer t % STAGES; NPS < kPVSteps: only its first 32 * NPS keys (the
  // rest masked for every row of the CTA).
  template <bool MASKED, int NPS = kPVSteps>
  static __device__ __forceinline__ void step(State& st, const Ctx& cx, const char* smem, u32 sbase, int t) {
    const int slot = t % STAGES;
    Scores s;
    if constexpr (QSMOOTH) block_mean_scores(const_cast<char*>(smem), sbase, slot);
    qk<NPS>(s, st, sbase + k_off(slot), WG ? q_tile_addr(sbase) : sbase);
    // ΔS comes from other warps: publish it. After this warp's Q·K^T, so that the mma latency overlaps
    // the wait. The ΔS buffer's next write (tile t + 1) follows the loop's barrier, after every read here.
    if constexpr (QSMOOTH) __syncthreads();
    if constexpr (WG) {
      dev::wgmma_wait<0>();
      dev::fence_operands(s[0]);
    }
    Logits u;
    RowVals m_tile;
    RowFac fac;
    const bool raise = logits<MASKED, NPS>(u, m_tile, fac, s, st, cx,
                                      reinterpret_cast<const float*>(smem + scale_off(slot)), t * BN,
                                      reinterpret_cast<const float*>(smem + kDsOff));
    if (__any_sync(0xffffffffu, raise)) raise_reference(st, m_tile, cx);
    softmax_pv<NPS>(st, u, fac, sbase + v_off(slot));
    if constexpr (WG) {
      dev::wgmma_wait<0>();
      dev::fence_operands(st.o[0]);
    }
  }

  // This warpgroup's 64 rows of the first Q atom (the others follow BM * kAtomBytes apart).
  // One warpgroup (bm 64): the address is the same for every thread, which the compiler then keeps in a
  // uniform register with the Q descriptor instead of rebuilding both from threadIdx in every tile.
  static __device__ __forceinline__ u32 q_tile_addr(u32 sbase) {
    return kThreads == 128 ? sbase : sbase + (threadIdx.x / 128) * 64 * kAtomBytes;
  }

  static constexpr float kPScaleOf = kIntPV ? kPScale : (kHalfV ? 1.f : kFp8PScale);   // P per unit 2^(L - R)

  static __device__ __forceinline__ void store_output(const AttentionParams& p, const State& st,
                                                      const Ctx& cx, int b, int h, int h_kv) {
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const float* vs = p.v_scale.ptr + b * p.v_scale.sb + h_kv * p.v_scale.sh;
    const float* vmean = p.v_mean ? p.v_mean + (static_cast<long long>(b) * p.heads_kv + h_kv) * D : nullptr;
    dev::u16* out = static_cast<dev::u16*>(p.o.ptr) + b * p.o.sb + h * p.o.sh;
    const float vs_all = V_GRAN == Gran::per_tensor ? vs[0] : 1.f;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const float l_exact = dev::quad_sum(st.l_x[mt][hf]);
        const float l = kExactSum ? l_exact : dev::quad_sum(static_cast<float>(st.l_q[mt][hf]));
        const int row = cx.row0 + 16 * mt + g + 8 * hf;
        if (row >= cx.q_len) continue;
        const bool seen = l > 0.f;
        const float inv = seen ? vs_all / l : 0.f;
        dev::u16* orow = out + row * p.o.ss;
#pragma unroll
        for (int n = 0; n < kON; ++n) {
          const int col = 8 * n + 2 * t4;
          const float2 o2 = o_pair(st, mt, n, hf);
          float v0 = o2.x * inv, v1 = o2.y * inv;
          if (V_GRAN == Gran::per_channel) {
            const float2 sc = *reinterpret_cast<const float2*>(vs + col);
            v0 *= sc.x;
            v1 *= sc.y;
          }
          if (vmean && seen) {
            const float2 mu = *reinterpret_cast<const float2*>(vmean + col);
            v0 += mu.x;
            v1 += mu.y;
          }
          *reinterpret_cast<u32*>(orow + col) = dev::pack2<OUT>(v0, v1);
        }
        if (p.lse && t4 == 0) {
          p.lse[(static_cast<long long>(b) * p.heads_q + h) * cx.q_len + row] =
              l_exact > 0.f ? (st.r[mt][hf] + dev::log2_approx(l_exact / kPScaleOf)) * dev::kLn2 : dev::neg_inf();
        }
      }
  }

  // Fused Q (QF != none, tiling _qf): the CTA quantizes its own Q tile from the fp16/bf16 Q (p.q is then
  // the caller's tensor, element strides), as the Q pass would (generator/quant_plan.hpp): per row its abs-max, the
  // max over the row's scale group (per_token: the row; per_warp: 32 consecutive rows; per_thread: rows
  // g, g + 8, g + 16, g + 24 of 32; per_block: 64 rows; all inside the CTA's tile, whose first row is a
  // multiple of bm), scale = amax / qmax, code = round-half-even(x · m) with m = qmax / amax in fp32 (qmax
  // 7 for qk=int4). Where x / scale is an exact tie (fp16 inputs can make one), the rounded m may put it
  // on the other side: the code then differs by one from the Q pass's, and is as close to x.
  // The codes go straight into the swizzled int8 Q tile, the group abs-maxes to shared memory
  // (kFusedQOff; run() turns them into st.qs after its barrier). This saves the Q pass (a read and a
  // write of Q through HBM) for a read of the fp16 Q here, overlapping the KV tiles in flight.
  // Each task is one 16-byte chunk of codes: 16 channels, two 16-byte loads; a row's chunks are
  // adjacent tasks. Where a row's chunks fill an aligned group of lanes (d 64 / 128 / 256: 4, 8, 16
  // chunks), its abs-max is a shuffle reduction and per_token needs no barrier at all; d = 96 (6 chunks)
  // gathers it with shared-memory atomics. The codes come from one fma with 1.5 · 2^23 (int8_ptx.cuh's
  // kMagic: the float's low byte is then the rounded code), no float-to-int conversions; |x · qmax /
  // amax| <= qmax, so no clamp. (With conversions and atomics for every d the prologue would cost
  // about half of the Q pass it saves.)
  static constexpr int kFusedQOff = smem_bytes(D, BM, BN, STAGES, false, kVBytes, S4, QSMOOTH);   // after the tiles
  static constexpr int kQMax = INT4 ? 7 : 127;
  static constexpr bool kRowShuffle = kDChunks == 4 || kDChunks == 8 || kDChunks == 16;
  static __device__ void quantize_q_tile(const AttentionParams& p, char* smem, u32 sbase, int b, int h, int q0) {
    float* row_amax = reinterpret_cast<float*>(smem + kFusedQOff);
    float* group_amax = row_amax + BM;
    const dev::u16* qh = static_cast<const dev::u16*>(p.q.ptr) + b * p.q.sb + h * p.q.sh;
    constexpr int kTasks = BM * kDChunks, kPer = (kTasks + kThreads - 1) / kThreads;
    static_assert(!kRowShuffle || kTasks % kThreads == 0, "fused Q: whole rows per sweep of the CTA");
    const int tid = threadIdx.x;
    if constexpr (!kRowShuffle)
      for (int r = tid; r < BM; r += kThreads) row_amax[r] = 0.f;
    uint4 raw[kPer][2];
#pragma unroll
    for (int it = 0; it < kPer; ++it) {
      const int task = it * kThreads + tid, r = task / kDChunks, c = task % kDChunks;
      const bool ok = (kTasks % kThreads == 0 || task < kTasks) && q0 + r < p.q_len;
      const dev::u16* src = qh + (ok ? (q0 + r) * p.q.ss + c * 16 : 0);
      raw[it][0] = ok ? quant::load16(src) : make_uint4(0u, 0u, 0u, 0u);
      raw[it][1] = ok ? quant::load16(src + 8) : make_uint4(0u, 0u, 0u, 0u);
    }
    if constexpr (!kRowShuffle) __syncthreads();   // row_amax zeroed
    float amax[kPer];
#pragma unroll
    for (int it = 0; it < kPer; ++it) {
      amax[it] = 0.f;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const quant::Vec8 x = quant::unpack8<OUT>(raw[it][half]);
#pragma unroll
        for (int i = 0; i < 8; ++i) amax[it] = fmaxf(amax[it], fabsf(x.v[i]));
      }
      const int task = it * kThreads + tid;
      if constexpr (kRowShuffle) {
        amax[it] = quant::group_max<kDChunks>(amax[it]);
        if (QF != Gran::per_token && task % kDChunks == 0) row_amax[task / kDChunks] = amax[it];
      } else if (kTasks % kThreads == 0 || task < kTasks) {
        quant::atomic_max_nonneg(&row_amax[task / kDChunks], amax[it]);
      }
    }
    if constexpr (QF != Gran::per_token || !kRowShuffle) {
      __syncthreads();
      constexpr int kGroup = QF == Gran::per_block ? 64 : 32;   // Q's groups (quant_slots): per_block 64 rows
      for (int r = tid; r < BM; r += kThreads) group_amax[r] = quant::row_group_max<QF, kGroup>(row_amax, r);
      __syncthreads();
#pragma unroll
      for (int it = 0; it < kPer; ++it) {
        const int task = it * kThreads + tid;
        if (kTasks % kThreads == 0 || task < kTasks) amax[it] = group_amax[task / kDChunks];
      }
    }
#pragma unroll
    for (int it = 0; it < kPer; ++it) {
      const int task = it * kThreads + tid, r = task / kDChunks, c = task % kDChunks;
      if (kTasks % kThreads != 0 && task >= kTasks) continue;
      if (QF == Gran::per_token && kRowShuffle && c == 0) group_amax[r] = amax[it];
      const float mult = quant::code_multiplier(amax[it], static_cast<float>(kQMax));
      u32 w[4];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const quant::Vec8 x = quant::unpack8<OUT>(raw[it][half]);
        int code[8];   // the low byte of the float bits is the code
#pragma unroll
        for (int i = 0; i < 8; ++i) code[i] = __float_as_int(fmaf(x.v[i], mult, int8::kMagic));
        w[2 * half] = quant::pack4_s8(code[0], code[1], code[2], code[3]);
        w[2 * half + 1] = quant::pack4_s8(code[4], code[5], code[6], code[7]);
      }
      dev::st_shared_16(qk_addr<BM>(sbase, r, c), dev::U32x4{w[0], w[1], w[2], w[3]});
    }
  }

 public:
  // TMA (_tma): the kernel's parameter is a TmaAttentionParams (its maps must stay in parameter space).
  static __device__ __forceinline__ void run_tma(const TmaAttentionParams& p, char* smem) {
    run(p.a, smem, &p.k_map, &p.v_map);
  }

  static __device__ __forceinline__ void run(const AttentionParams& p, char* smem, const TmaMap* k_map = nullptr,
                                             const TmaMap* v_map = nullptr) {
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    // Causal: the heaviest query tiles first; in the wgmma form in bands of heads whose K/V fit L2
    // (tile_order.h).
    constexpr tile_order::Order kOrder = !CAUSAL ? tile_order::Order::in_order
                                         : WG      ? tile_order::Order::banded
                                                   : tile_order::Order::by_head;
    const tile_order::Slot slot = tile_order::this_cta<kOrder>(p.heads_q);
    if (kOrder == tile_order::Order::banded && slot.b >= p.batch) return;   // past the last head of the last band
    const int q_tile = slot.q_tile, h = slot.h, b = slot.b;
    const int h_kv = h / (p.heads_q / p.heads_kv);
    const int q0 = q_tile * BM;

    Ctx cx;
    cx.k = static_cast<const signed char*>(p.k.ptr) + b * p.k.sb + h_kv * p.k.sh;
    cx.v = static_cast<const signed char*>(p.v.ptr) + b * p.v.sb + h_kv * p.v.sh;
    cx.k_scale = p.k_scale.ptr + b * p.k_scale.sb + h_kv * p.k_scale.sh;
    cx.k_ss = p.k.ss;
    cx.v_sc = p.v.sc;
    cx.k_group = p.k_scale.group;
    cx.kv_len = p.kv_len;
    cx.q_len = p.q_len;
    cx.causal_offset = p.kv_len - p.q_len;
    cx.row0 = q0 + warp * 16 * kMT;
    cx.vh = static_cast<const dev::u16*>(p.v.ptr) + b * p.v.sb + h_kv * p.v.sh;
    cx.v_ss = p.v.ss;
    if constexpr (TMA) {   // the host checked that these divide (runtime/device/tma_maps.cpp)
      const long long k_at = b * p.k.sb + h_kv * p.k.sh;
      cx.k_map = k_map;
      cx.v_map = v_map;
      cx.k_col = static_cast<int>(k_at % p.k.ss);
      cx.k_group16 = static_cast<int>(k_at / p.k.ss / 16);
      cx.v_row = static_cast<int>((b * p.v.sb + h_kv * p.v.sh) / p.v.sc);
    }

    // KV tiles [0, n_tiles) hold every key any row of this CTA sees; the first n_full need no mask.
    int kv_end = p.kv_len;
    int n_full = p.kv_len / BN;
    if (CAUSAL) {
      const int last_row = (q0 + BM < p.q_len ? q0 + BM : p.q_len) - 1;
      kv_end = kv_end < last_row + cx.causal_offset + 1 ? kv_end : last_row + cx.causal_offset + 1;
      const int first_row_end = q0 + cx.causal_offset + 1;
      const int full_by_row = first_row_end > 0 ? first_row_end / BN : 0;
      n_full = n_full < full_by_row ? n_full : full_by_row;
    }
    const int n_tiles = kv_end > 0 ? (kv_end + BN - 1) / BN : 0;
    // Each thread holds bn / 4 keys of a row per tile, each P̂ <= 255 (and y < 255): 255 · 32768 / 4 <
    // kLRescale, 255 · 30720 / 4 < kLxRescale. Float O has no integer range to keep.
    cx.check_lq = kIntPV && n_tiles * BN > (kExactSum ? 30720 : 32768);

    State st;
    const signed char* qg = static_cast<const signed char*>(p.q.ptr) + b * p.q.sb + h * p.q.sh;
    const float* qscale = p.q_scale.ptr + b * p.q_scale.sb + h * p.q_scale.sh;
    const float qmul = p.softmax_scale * dev::kLog2e;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int row = cx.row0 + 16 * mt + (lane >> 2) + 8 * hf;
        float qs = 1.f;
        if (QF == Gran::none && row < p.q_len) qs = qscale[p.q_scale.group > 0 ? row / p.q_scale.group : 0] * qmul;
        // A zero row (scale 0) must give a uniform softmax, not 0 · inf = NaN on masked keys.
        st.qs[mt][hf] = fmaxf(qs, 1e-30f);
        st.r[mt][hf] = dev::neg_inf();
        st.l_q[mt][hf] = 0u;
        st.l_x[mt][hf] = 0.f;
      }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int n = 0; n < kON; ++n)
#pragma unroll
        for (int e = 0; e < (kHalfO ? 2 : 4); ++e) st.o[mt][n][e] = 0;

    if (n_tiles > 0) {
      u32 sbase = dev::smem_addr(smem);
      if constexpr (WG) {   // the swizzle atoms of wgmma operands are 1024-byte aligned (smem_bytes has the slack)
        const u32 pad = (1024u - (sbase & 1023u)) & 1023u;
        sbase += pad;
        smem += pad;
      }
      constexpr int kQChunks = BM * kDChunks;
#pragma unroll
      for (int it = 0; it < (QF == Gran::none ? (kQChunks + kThreads - 1) / kThreads : 0); ++it) {
        const int i = it * kThreads + tid;
        if (kQChunks % kThreads == 0 || i < kQChunks) {
          const int r = i / kDChunks, c = i % kDChunks;
          const bool ok = q0 + r < p.q_len;
          dev::cp_async_16(qk_addr<BM>(sbase, r, c),
                           qg + (ok ? (q0 + r) * p.q.ss + c * 16 : 0), ok);
        }
      }
      Loader ld = make_loader(cx);
      if constexpr (TMA) {
        if (tid == 0) {
          for (int s = 0; s < STAGES; ++s) dev::mbar_init(stage_barrier(sbase, s), 1);
          dev::fence_mbar_init();
          asm volatile("st.shared.u64 [%0], %1;" ::"r"(k_scales_slot(sbase)),
                       "l"(reinterpret_cast<unsigned long long>(cx.k_scale)) : "memory");
        }
        __syncthreads();
      }
      // The Q tile travels in the first group, together with KV tile 0.
#pragma unroll
      for (int s = 0; s < STAGES - 1; ++s) {
        if (s < n_tiles) load_kv_tile(cx, ld, sbase, s, s * BN);
        dev::cp_async_commit();
      }
      if constexpr (QSMOOTH) prepare_block_means(p, smem, b, h, q0);
      if constexpr (QF != Gran::none) quantize_q_tile(p, smem, sbase, b, h, q0);   // while the first KV tiles fly
      dev::cp_async_wait<STAGES - 2>();
      if constexpr (TMA) dev::fence_proxy_async();   // the Q tile, visible to wgmma (the loop has no fence)
      __syncthreads();
      if constexpr (QF != Gran::none) {   // the Q scales of the fused tile (written before the barrier)
        const float* group_amax = reinterpret_cast<const float*>(smem + kFusedQOff) + BM;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const int row = cx.row0 + 16 * mt + (lane >> 2) + 8 * hf;
            if (row < p.q_len)
              st.qs[mt][hf] = fmaxf(quant::scale_of(group_amax[row - q0], static_cast<float>(kQMax)) * qmul, 1e-30f);
          }
      }
      if constexpr (S4) load_q_s4(st, sbase);
      if constexpr (QSMOOTH) init_block_mean_factors(st, p, smem, qscale, q0);
#pragma unroll
      for (int mt = 0; mt < (WG || S4 || !kQInRegs ? 0 : kMT); ++mt)
#pragma unroll
        for (int ks = 0; ks < kQKSteps; ++ks) {
          const int row = warp * 16 * kMT + 16 * mt + (lane & 15);
          const int chunk = 2 * ks + (lane >> 4);
          dev::ldmatrix_x4(st.qf[mt][ks], qk_addr<BM>(sbase, row, chunk));
        }

      for (int t = 0; t < n_tiles; ++t) {
        dev::cp_async_wait<STAGES - 2>();
        if constexpr (TMA) dev::mbar_wait(stage_barrier(sbase, t % STAGES), (t / STAGES) & 1);
        else if constexpr (WG) dev::fence_proxy_async();   // this thread's cp.async writes, visible to wgmma
        __syncthreads();   // tile t landed for all threads; tile t - 1's buffer is free
        const int t_load = t + STAGES - 1;
        if (t_load < n_tiles) load_kv_tile(cx, ld, sbase, t_load % STAGES, t_load * BN);
        dev::cp_async_commit();
        if (t < n_full) {
          step<false>(st, cx, smem, sbase, t);
        } else if constexpr (kHalfTile) {
          if (t == n_tiles - 1 && kv_end - t * BN <= BN / 2) step<true, kPVSteps / 2>(st, cx, smem, sbase, t);
          else step<true>(st, cx, smem, sbase, t);
        } else {
          step<true>(st, cx, smem, sbase, t);
        }
      }
      dev::cp_async_wait<0>();
    }
    if constexpr (kOrder == tile_order::Order::banded) {
      const tile_order::Slot end = tile_order::this_cta_again<kOrder>(p.heads_q);   // not held through the loop
      store_output(p, st, cx, end.b, end.h, end.h / (p.heads_q / p.heads_kv));
    } else {
      store_output(p, st, cx, b, h, h_kv);
    }
  }
};

}  // namespace prefill_int8
}  // namespace qattn

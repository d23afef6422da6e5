// INT8 prefill attention (INT-FlashAttention): both Q·K^T and P·V run on int8 tensor cores
// (mma.sync m16n8k32, int32 accumulate), FlashAttention-2 style: one CTA per (query tile, head, batch),
// each warp owns 16 or 32 query rows, K / V^T tiles stream through a cp.async ring.
//
// Numerics, per query row (logits in base 2):
//   u   = (Q̂·K̂^T) · k_scale[key]                    int32 to fp32 (see Scores)
//   L   = u · q_scale[row] · softmax_scale · log2(e)
//   R   = reference max, R >= every L seen; set to the first tile's max, then raised by whole steps
//         (R += ceil(tile max - R + kHeadroom)) when a tile exceeds it
//   P̂   = round(254.51 · 2^(L - R)) ∈ [0, 255]       u8 A operand of the P·V mma
//   O  += P̂·V̂    in the mma's own int32 accumulators: exact, and no per-tile float work on O
//   when R rises by k:  O, l <- round(O / 2^k), ...   (two integer ops per element; mostly in the
//                       first tiles of a row, where its running max still climbs)
//   out = O · v_scale[c] / l (+ v_mean[c])
// Compared with the paper (P̂ = round(127 · exp(S - m)), P̂·V converted and rescaled into an fp32 O
// every tile): P is unsigned with 255 levels (mma .u8.s8) and O stays int32, so the per-element
// float work is only the logits and the exponentials, which bound the speed once the matmuls are int8.
//
// The row sum l: Σ P̂ (paper) or Σ 254.51 · 2^(L - R) before rounding. P̂ flushes probabilities under
// ~1/510 of R to 0. With Σ P̂ the lost mass leaves the denominator too (O = weighted mean of the
// surviving keys: right when V is not centred); with the exact sum the lost keys count as V = 0
// (right when V is centred, which V smoothing guarantees). The kernel takes the exact sum when
// p.v_mean is set and Σ P̂ otherwise; on outlier-heavy data this halves the error with smoothing.
//
// Schedule per tile: wait for the tile, one barrier, issue the load of tile t + STAGES - 1, then
// Q·K^T, logits, softmax and P·V. (Issuing the Q·K^T of tile t+1 before the softmax of tile t was
// measured: no faster on H100, and its second S tile costs the registers of a second row tile.)
//
// Overflow: |S| <= d · 128² < 2^22 (the bias trick); a thread's share of Σ P̂ is kept <= 2^21 by an
// extra halving, so |O| <= 127 · 4 · (2^21 + 255 · bn / 4) < 2^31.
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
//                      is shared. Measured on H100 (bench/results/): 1.68-2.03x the flash backend at
//                      d = 128, where the mma.sync form reached 1.19-1.42x. d = 96 and 256 keep Q and K
//                      as column blocks of one swizzle atom (kAtomBytes) and split P·V's n (wgmma.cuh).
// Tried on the wgmma form and measured slower on H100 (so not here): issuing the Q·K^T of tile t + 1
// before the softmax of tile t (two S tiles: 237+ registers, 2 CTAs per SM; 15-30% slower), and the
// exponentials as ex2.approx.f16x2 pairs (1-3% slower: the exponentials are not the limit).
//
// Requirements on the tensors (see abi.h): Q, K, O rows contiguous (sc = 1); V^T rows (sc = row stride)
// zero-padded to kVPadTokens tokens; every row start 16-byte aligned (int8 tensors) or 4-byte aligned
// (O); softmax_scale > 0.
#pragma once

#include "qattn/abi.h"
#include "qattn/attention/prefill_int8_shape.h"
#include "qattn/common/common.cuh"
#include "qattn/common/int8_ptx.cuh"
#include "qattn/common/wgmma.cuh"

namespace qattn {
namespace prefill_int8 {

// Slightly under 255 so that fp32 rounding near L = R can never produce 256 (a wrapped byte).
constexpr float kPScale = 254.51f;
constexpr float kLog2PScale = 7.9915785f;   // log2(kPScale)
constexpr dev::u32 kLRescale = 1u << 21;    // a thread's share of Σ P̂ above this halves O and l
// Least distance (log2 units) from a raised R down to the max that raised it: more headroom, fewer
// rescales, coarser P̂. Measured on H100 (d 128, N 4k / 16k): 0.5 is 1-5% faster than 0 and raises
// the error of un-smoothed V by ~20%; 1.0 is 2-6% faster and fails cos >= 0.999 on un-smoothed V.
#ifndef QATTN_INT8_HEADROOM
#define QATTN_INT8_HEADROOM 0.0f
#endif
constexpr float kHeadroom = QATTN_INT8_HEADROOM;

template <Gran V_GRAN, Fmt OUT, int D, bool CAUSAL, int BM, int BN, int WARPS, int STAGES, bool WG = false,
          bool QSMOOTH = false>
struct Kernel {
  static_assert(V_GRAN == Gran::per_tensor || V_GRAN == Gran::per_channel,
                "prefill_int8: V scale must be per_tensor or per_channel");
  static_assert(OUT == Fmt::fp16 || OUT == Fmt::bf16, "prefill_int8: output must be fp16 or bf16");
  static_assert(tiling_ok(D, BM, BN, WARPS, STAGES, WG, QSMOOTH), "prefill_int8: invalid tiling (see prefill_int8_shape.h)");
  static_assert(!(QSMOOTH && WG), "prefill_int8: Q smoothing exists in the mma.sync form only");
  static_assert(BM % kQMeanBlock == 0, "prefill_int8: bm must be a whole number of Q-mean blocks");

  static constexpr int kThreads = WARPS * 32;
  static constexpr int kSmemBytes = smem_bytes(D, BM, BN, STAGES, WG, QSMOOTH);

 private:
  using u32 = dev::u32;
  static constexpr int kMT = BM / (16 * WARPS);   // m16 row tiles per warp
  static constexpr int kSN = BN / 8;              // n8 column blocks of S
  static constexpr int kON = D / 8;               // n8 column blocks of O
  static constexpr int kQKSteps = D / 32;         // k32 steps of Q·K^T
  static constexpr int kPVSteps = BN / 32;        // k32 steps of P·V
  static constexpr int kDChunks = D / 16;         // 16-byte chunks per Q / K row
  // Q and K tiles are stored as kAtoms column blocks ("atoms") of kAtomBytes per row, each a
  // [rows][kAtomBytes] tile swizzled by int8::swizzle: one atom of d bytes at d = 64 and 128, two of
  // 128 at d = 256, three of 32 at d = 96. wgmma needs it (its K-major smem operands have rows of one
  // swizzle atom, 32, 64 or 128 bytes), and ldmatrix reads every layout without bank conflicts.
  static constexpr int kAtomBytes = D % 128 == 0 ? 128 : (D % 64 == 0 ? 64 : 32);
  static constexpr int kAtomChunks = kAtomBytes / 16;
  static constexpr int kAtoms = D / kAtomBytes;
  static constexpr int kNChunks = BN / 16;        // 16-byte chunks per V^T row
  static constexpr int kKTileBytes = BN * D;      // == V^T tile bytes
  // Shared memory (offsets from the base): Q, then per stage K and V^T (and, for mma.sync, the K
  // scales); the wgmma form keeps the scales of all stages after the last stage (1024-byte tiles).
  static constexpr int kStageBytes = 2 * kKTileBytes + (WG ? 0 : 4 * BN);
  static __device__ __forceinline__ int k_off(int slot) { return BM * D + slot * kStageBytes; }
  static __device__ __forceinline__ int v_off(int slot) { return k_off(slot) + kKTileBytes; }
  static __device__ __forceinline__ int scale_off(int slot) {
    return WG ? BM * D + STAGES * kStageBytes + slot * 4 * BN : k_off(slot) + 2 * kKTileBytes;
  }
  // Address of 16-byte chunk `chunk` of row `row` in the Q or K tile of ROWS rows at `tile` (see
  // kAtomBytes). Summed left to right as the d = 64 / 128 kernels always did (same code as before).
  template <int ROWS>
  static __device__ __forceinline__ u32 qk_addr(u32 tile, int row, int chunk) {
    if constexpr (kAtoms == 1) return tile + row * D + int8::swizzle<kDChunks>(row, chunk) * 16;
    else
      return tile + (chunk / kAtomChunks) * (ROWS * kAtomBytes) + row * kAtomBytes +
             int8::swizzle<kAtomChunks>(row, chunk % kAtomChunks) * 16;
  }

  // S accumulators. mma.sync form: biased (they start at kMagicBits, so the int32 reads as a float
  // with no conversion: sm_80's I2F is a quarter-rate op). wgmma form: raw (the first product ignores
  // the old values, so no per-tile initialisation) and converted with I2FP, which sm_90 runs at the
  // rate of plain ALU ops (measured: 5-7% faster than the biased start).
  using Scores = int[kMT][kSN][4];
  static constexpr bool kRawS = WG;
  using Logits = float[kMT][kSN][4];    // u = S · k_scale
  using RowVals = float[kMT][2];        // one value per row: rows g and g + 8 of each m16 tile

  // Per-CTA addressing, resolved once.
  struct Ctx {
    const signed char* k;   // K of (b, h_kv)
    const signed char* v;   // V^T of (b, h_kv)
    const float* k_scale;   // K scales of (b, h_kv)
    long long k_ss, v_sc;
    int k_group, kv_len, q_len, causal_offset;
    bool check_lq;          // a thread's share of Σ P̂ can pass kLRescale (more than 32768 keys)
    int row0;               // first query row of this warp
  };

  // Per-warp running state; fully unrolled indexing keeps all of it in registers.
  struct State {
    u32 qf[kMT][kQKSteps][4];   // Q A-fragments, loaded once (mma.sync form only)
    int o[kMT][kON][4];         // O in units of P̂ · V codes: the P·V mma accumulators
    u32 l_q[kMT][2];            // this thread's share of Σ P̂
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
          const bool ok = k_row + it * kKRowStep < cx.kv_len;   // K is not padded: zero-fill past kv_len
          const u32 dst = kKLinearPasses ? k_smem + it * kKPassBytes
                                         : qk_addr<BN>(sbase + k_off(slot), k_smem_row(kr + it * kKRowStep), kc);
          dev::cp_async_16(dst, ok ? ksrc : ld.k, ok);
        }
        ksrc += ld.k_pass;
      }
    }
    const int vr = tid / kNChunks, vc = tid % kNChunks;
    const u32 v_smem = sbase + v_off(slot) + vr * BN + int8::swizzle<kNChunks>(vr, vc) * 16;
    const signed char* vsrc = ld.v;
#pragma unroll
    for (int it = 0; it < kVPasses; ++it) {
      // V^T is zero-padded to kVPadTokens and bn divides it: always in bounds.
      if (D % kVRowStep == 0 || vr + it * kVRowStep < D) dev::cp_async_16(v_smem + it * kVRowStep * BN, vsrc, true);
      vsrc += ld.v_pass;
    }
    if (tid < BN) {
      const int key = k0 + tid;
      const bool ok = key < cx.kv_len;
      const int idx = cx.k_group == 1 ? key : (cx.k_group > 0 ? key / cx.k_group : 0);
      dev::cp_async_ca<4>(sbase + scale_off(slot) + 4 * tid, cx.k_scale + (ok ? idx : 0), ok);
    }
    ld.k += BN * cx.k_ss;
    ld.v += BN;
    ld.k_row += BN;
  }

  // S = Q̂·K̂^T of the K tile at ktile (biased or raw: see Scores).
  // qtile: this warpgroup's 64 Q rows (wgmma form only).
  static __device__ __forceinline__ void qk(Scores& s, const State& st, u32 ktile, u32 qtile) {
    const int lane = threadIdx.x & 31;
    if constexpr (!kRawS) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int j = 0; j < kSN; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][j][e] = int8::kMagicBits;
    }
    if constexpr (WG) {
      const dev::u64 qd = dev::wgmma_desc(qtile, kAtomBytes), kd = dev::wgmma_desc(ktile, kAtomBytes);
      // k-step ks reads the 32 bytes at 32 * (ks % kStepsPerAtom) of every row of atom ks / kStepsPerAtom
      // (descriptor addresses count 16-byte units).
      constexpr int kStepsPerAtom = kAtomBytes / 32;
      dev::wgmma_fence();
      dev::wgmma_s8s8_ss<BN>(s[0], qd, kd, 0);   // raw S (kRawS)
#pragma unroll
      for (int ks = 1; ks < kQKSteps; ++ks) {
        const int atom = ks / kStepsPerAtom, step = 2 * (ks % kStepsPerAtom);
        dev::wgmma_s8s8_ss<BN>(s[0], qd + atom * (BM * kAtomBytes / 16) + step, kd + atom * (BN * kAtomBytes / 16) + step);
      }
      dev::wgmma_commit();   // the caller waits
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
            dev::mma_m16n8k32_s8_s32(s[mt][j], st.qf[mt][2 * h], b0);
            dev::mma_m16n8k32_s8_s32(s[mt][j], st.qf[mt][2 * h + 1], b1);
          }
        }
        if constexpr (D % 64 != 0) {   // d = 96: the last k32 step alone, from an x2 load (lanes 0-15)
          constexpr int ks = D / 32 - 1;
          u32 kb[2];
          const int row = 8 * j + (lane & 7), chunk = 2 * ks + ((lane >> 3) & 1);
          dev::ldmatrix_x2(kb, qk_addr<BN>(ktile, row, chunk));
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) dev::mma_m16n8k32_s8_s32(s[mt][j], st.qf[mt][ks], kb);
        }
      }
    }
  }

  // u = S · k_scale (masked keys: -inf) and the tile max of L per row. Returns whether R must rise.
  // QSMOOTH: ds = the staged ΔS · k_scale of the CTA's block means (block_mean_scores), added to u
  // (times the row's dsf) before the max.
  template <bool MASKED>
  static __device__ __forceinline__ bool logits(Logits& u, RowVals& m_tile, const Scores& s, const State& st,
                                                const Ctx& cx, const float* kscale, int k0, const float* ds) {
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
    // (blocks j2, j3): two float4 reads of the staged scales.
#pragma unroll
    for (int ps = 0; ps < kPVSteps; ++ps) {
      const float4 lo = *reinterpret_cast<const float4*>(kscale + 32 * ps + 4 * t4);
      const float4 hi = *reinterpret_cast<const float4*>(kscale + 32 * ps + 16 + 4 * t4);
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
            float x = kRawS ? int8::i2f(s[mt][4 * ps + jj][e]) * ksc[jj][e & 1]
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
        for (int j = 0; j < kSN; ++j) mx[j] = fmaxf(u[mt][j][2 * hf], u[mt][j][2 * hf + 1]);
#pragma unroll
        for (int w = 1; w < kSN; w *= 2)
#pragma unroll
          for (int j = 0; j + w < kSN; j += 2 * w) mx[j] = fmaxf(mx[j], mx[j + w]);
        m_tile[mt][hf] = dev::quad_max(mx[0]) * st.qs[mt][hf];   // qs > 0: -inf stays -inf
        raise |= m_tile[mt][hf] > st.r[mt][hf] || (cx.check_lq && st.l_q[mt][hf] > kLRescale);
      }
    return raise;
  }

  // Raises R of the rows whose tile max exceeds it, or whose Σ P̂ grew large, by whole steps k and
  // divides O and l by 2^k. The first keys of a row set R to their max (+ kHeadroom).
  // The work is per warp (any of its rows); within it, each half of the rows (hf) skips the O shifts
  // when none of its 8 rows rises, and the Σ P̂ check (two shuffles) runs only where a row's sum can
  // reach kLRescale at all (cx.check_lq).
  static __device__ __forceinline__ void raise_reference(State& st, const RowVals& m_tile, const Ctx& cx) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        u32 lq = st.l_q[mt][hf];
        if (cx.check_lq) {
          u32 other = dev::shfl_xor(lq, 1);
          lq = lq > other ? lq : other;
          other = dev::shfl_xor(lq, 2);
          lq = lq > other ? lq : other;
        }
        const float r_old = st.r[mt][hf], m = m_tile[mt][hf];
        int k = 0;
        float r_new = r_old;
        if (m > r_old) {
          if (r_old == dev::neg_inf()) {
            r_new = m + kHeadroom;   // O and l are still 0
          } else {
            const float steps = ceilf(m - r_old + kHeadroom);
            k = steps < 64.f ? static_cast<int>(steps) : 64;
            r_new = r_old + steps;
          }
        }
        if (cx.check_lq && lq > kLRescale) {
          k += 1;
          r_new += 1.f;
        }
        st.r[mt][hf] = r_new;
        if (!__any_sync(0xffffffffu, k != 0)) continue;
#pragma unroll
        for (int n = 0; n < kON; ++n)
#pragma unroll
          for (int e = 2 * hf; e < 2 * hf + 2; ++e) st.o[mt][n][e] = int8::shift_round(st.o[mt][n][e], k);
        st.l_q[mt][hf] = int8::shift_round(st.l_q[mt][hf], k);
        st.l_x[mt][hf] *= dev::exp2_approx(static_cast<float>(-k));
      }
  }

  // P̂ = round(kPScale · 2^(L - R)) packed straight into the A fragments of P·V, the two row sums,
  // and O += P̂·V̂ with the V^T tile at vtile.
  static __device__ __forceinline__ void softmax_pv(State& st, const Logits& u, u32 vtile) {
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
      for (int ps = 0; ps < kPVSteps; ++ps) {
        float y[4][4];
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            y[jj][e] = dev::exp2_approx(fmaf(u[mt][4 * ps + jj][e], st.qs[mt][e >> 1], pbias[e >> 1]));
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
        st.l_q[mt][0] = int8::byte_sum(pf[mt][ps][0], int8::byte_sum(pf[mt][ps][2], st.l_q[mt][0]));
        st.l_q[mt][1] = int8::byte_sum(pf[mt][ps][1], int8::byte_sum(pf[mt][ps][3], st.l_q[mt][1]));
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
      for (int ps = 0; ps < kPVSteps; ++ps) dev::wgmma_u8s8_rs<D>(st.o[0], pf[0][ps], vd + 2 * ps, BN);
      dev::wgmma_commit();   // the caller waits
    } else {
#pragma unroll
      for (int c = 0; c < D / 16; ++c) {
#pragma unroll
        for (int ps = 0; ps < kPVSteps; ++ps) {
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
  static constexpr int kMeanFragOff = smem_bytes(D, BM, BN, STAGES, WG);
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

  // One KV tile, resident in stage buffer t % STAGES.
  template <bool MASKED>
  static __device__ __forceinline__ void step(State& st, const Ctx& cx, const char* smem, u32 sbase, int t) {
    const int slot = t % STAGES;
    Scores s;
    if constexpr (QSMOOTH) block_mean_scores(const_cast<char*>(smem), sbase, slot);
    qk(s, st, sbase + k_off(slot), q_tile_addr(sbase));
    // ΔS comes from other warps: publish it. After this warp's Q·K^T, so that the mma latency overlaps
    // the wait. The ΔS buffer's next write (tile t + 1) follows the loop's barrier, after every read here.
    if constexpr (QSMOOTH) __syncthreads();
    if constexpr (WG) {
      dev::wgmma_wait<0>();
      dev::fence_operands(s[0]);
    }
    Logits u;
    RowVals m_tile;
    const bool raise = logits<MASKED>(u, m_tile, s, st, cx,
                                      reinterpret_cast<const float*>(smem + scale_off(slot)), t * BN,
                                      reinterpret_cast<const float*>(smem + kDsOff));
    if (__any_sync(0xffffffffu, raise)) raise_reference(st, m_tile, cx);
    softmax_pv(st, u, sbase + v_off(slot));
    if constexpr (WG) {
      dev::wgmma_wait<0>();
      dev::fence_operands(st.o[0]);
    }
  }

  // This warpgroup's 64 rows of the first Q atom (the others follow BM * kAtomBytes apart).
  static __device__ __forceinline__ u32 q_tile_addr(u32 sbase) { return sbase + (threadIdx.x / 128) * 64 * kAtomBytes; }

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
        const float l = vmean ? l_exact : dev::quad_sum(static_cast<float>(st.l_q[mt][hf]));
        const int row = cx.row0 + 16 * mt + g + 8 * hf;
        if (row >= cx.q_len) continue;
        const bool seen = l > 0.f;
        const float inv = seen ? vs_all / l : 0.f;
        dev::u16* orow = out + row * p.o.ss;
#pragma unroll
        for (int n = 0; n < kON; ++n) {
          const int col = 8 * n + 2 * t4;
          float v0 = int8::i2f(st.o[mt][n][2 * hf]) * inv, v1 = int8::i2f(st.o[mt][n][2 * hf + 1]) * inv;
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
              l_exact > 0.f ? (st.r[mt][hf] + dev::log2_approx(l_exact / kPScale)) * dev::kLn2 : dev::neg_inf();
        }
      }
  }

 public:
  static __device__ __forceinline__ void run(const AttentionParams& p, char* smem) {
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    // Causal: the last query tiles carry the most keys; schedule them first.
    const int q_tile = CAUSAL ? static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x)
                              : static_cast<int>(blockIdx.x);
    const int h = blockIdx.y, b = blockIdx.z;
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
    // Each thread holds bn / 4 keys of a row per tile, each P̂ <= 255: 255 · 32768 / 4 < kLRescale.
    cx.check_lq = n_tiles * BN > 32768;

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
        if (row < p.q_len) qs = qscale[p.q_scale.group > 0 ? row / p.q_scale.group : 0] * qmul;
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
        for (int e = 0; e < 4; ++e) st.o[mt][n][e] = 0;

    if (n_tiles > 0) {
      u32 sbase = dev::smem_addr(smem);
      if constexpr (WG) {   // the swizzle atoms of wgmma operands are 1024-byte aligned (smem_bytes has the slack)
        const u32 pad = (1024u - (sbase & 1023u)) & 1023u;
        sbase += pad;
        smem += pad;
      }
      constexpr int kQChunks = BM * kDChunks;
#pragma unroll
      for (int it = 0; it < (kQChunks + kThreads - 1) / kThreads; ++it) {
        const int i = it * kThreads + tid;
        if (kQChunks % kThreads == 0 || i < kQChunks) {
          const int r = i / kDChunks, c = i % kDChunks;
          const bool ok = q0 + r < p.q_len;
          dev::cp_async_16(qk_addr<BM>(sbase, r, c),
                           qg + (ok ? (q0 + r) * p.q.ss + c * 16 : 0), ok);
        }
      }
      Loader ld = make_loader(cx);
      // The Q tile travels in the first group, together with KV tile 0.
#pragma unroll
      for (int s = 0; s < STAGES - 1; ++s) {
        if (s < n_tiles) load_kv_tile(cx, ld, sbase, s, s * BN);
        dev::cp_async_commit();
      }
      if constexpr (QSMOOTH) prepare_block_means(p, smem, b, h, q0);
      dev::cp_async_wait<STAGES - 2>();
      __syncthreads();
      if constexpr (QSMOOTH) init_block_mean_factors(st, p, smem, qscale, q0);
#pragma unroll
      for (int mt = 0; mt < (WG ? 0 : kMT); ++mt)
#pragma unroll
        for (int ks = 0; ks < kQKSteps; ++ks) {
          const int row = warp * 16 * kMT + 16 * mt + (lane & 15);
          const int chunk = 2 * ks + (lane >> 4);
          dev::ldmatrix_x4(st.qf[mt][ks], qk_addr<BM>(sbase, row, chunk));
        }

      for (int t = 0; t < n_tiles; ++t) {
        dev::cp_async_wait<STAGES - 2>();
        if constexpr (WG) dev::fence_proxy_async();   // this thread's cp.async writes, visible to wgmma
        __syncthreads();   // tile t landed for all threads; tile t - 1's buffer is free
        const int t_load = t + STAGES - 1;
        if (t_load < n_tiles) load_kv_tile(cx, ld, sbase, t_load % STAGES, t_load * BN);
        dev::cp_async_commit();
        if (t < n_full) step<false>(st, cx, smem, sbase, t);
        else step<true>(st, cx, smem, sbase, t);
      }
      dev::cp_async_wait<0>();
    }
    store_output(p, st, cx, b, h, h_kv);
  }
};

}  // namespace prefill_int8
}  // namespace qattn

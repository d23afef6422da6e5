// Split-K decode attention on tensor cores (the `mma` dataflow): the M = gqa x q_len query rows that
// share a KV head attend to that head's cache; the cache's tokens are split across CTAs (grid.x), and
// each CTA's split is cut into chunks of BN tokens that its warps take in turn.
//
// Per warp and chunk (every operand in registers, fp32 accumulators):
//   S = Q K^T       mma.sync m16n8k16, Q as the A operand with the M rows padded to 16 (the scores
//                   are scaled by softmax_scale * log2 e in fp32 afterwards), K as the B operand
//                   decoded straight from the raw cache rows in shared memory (int8 / int4 / fp8 codes
//                   -> fp16 in registers, no staging).
//                   A B-fragment wants, per lane, consecutive k pairs of one token; the lane reads one
//                   32-bit word (int8, fp8: 4 channels, int4: 8) or 8 bytes (fp16/bf16: 4 channels) of its
//                   token's row instead, and the Q fragment is gathered with the same channel order
//                   (a dot product does not care about the order of its terms).
//   online softmax  in base 2, per warp (no inter-warp traffic inside the loop); softmax=unified_max
//                   (FlashDecoding++): 2^(x2 - phi2) with one constant phi2, no max and no rescale,
//                   and per row flags for the exact fallback (abi.h, DecodeParams; finish())
//   O += P V        P from the S registers (C layout == A layout); V fragments by ldmatrix.trans from
//                   the fp16/bf16 chunk or, for quantized caches, decoded straight from the raw rows
//                   into registers (each lane reads whole words of its tokens' rows; the channel order
//                   this gives is mapped back when the output is written). Per-token scales are folded
//                   into P and the int4 shift into one sum per row, so the codes enter as integers.
// Chunks travel by cp.async in 16-byte units, STAGES per warp in flight; a unit never straddles a
// page because 4 rows are a 16-byte multiple and pages hold a multiple of 4 rows.
// At the end the warps' (max, sum, O) are merged through shared memory; with one split the CTA writes
// the output, otherwise its normalised partial and log2-sum-exp2 for the combine kernel.
// fp8e4m3: the head's K scale folds into the softmax scale and its V scale into O. flashq: run_blocks()
// below (a chunk is one 64-token block, codes through the block's parameter table).
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"
#include "qattn/decode/chunk_loader.cuh"
#include "qattn/decode/decode_shape.h"
#include "qattn/decode/flashq_dequant.cuh"
#include "qattn/decode/kv_dequant.cuh"
#include "qattn/decode/sas.h"

namespace qattn::decode {

template <Fmt KV, Gran G, Fmt OUT, int D, bool CAUSAL, bool PAGED, SoftmaxMode SMX, int BM, int BN, int WARPS,
          int STAGES>
struct Kernel {
  static_assert(tiling_ok(KV, G, D, BM, BN, WARPS, STAGES), "decode: unsupported format or tiling (decode_shape.h)");
  static_assert(OUT == Fmt::fp16 || OUT == Fmt::bf16, "decode: queries and outputs are fp16 or bf16");
  static_assert(KV != Fmt::flashq || !CAUSAL, "decode: flashq blocks are never masked (the new tokens are in the buffer)");
  static_assert(SMX == SoftmaxMode::exact || SMX == SoftmaxMode::sas || SMX == SoftmaxMode::unified_max,
                "decode: softmax exact, sas or unified_max");

  static constexpr int kThreads = WARPS * 32;
  static constexpr int kSmemBytes = smem_bytes(KV, G, D, BM, BN, WARPS, STAGES);

 private:
  using u16 = dev::u16;
  using u32 = dev::u32;

  static constexpr bool kQuant = quantized(KV);
  static constexpr Fmt kMma = KV == Fmt::bf16 ? Fmt::bf16 : Fmt::fp16;   // element type of both products
  static constexpr int kRow = kv::row_bytes(KV, G, D);
  static constexpr int kHdr = kv::header_bytes(KV, G);
  static constexpr int kGroupChannels = D / kv::groups(KV, G);
  static constexpr int kMT = BM / 16;         // m16 tiles (query rows)
  static constexpr int kSteps = D / 16;       // k16 steps of Q K^T
  static constexpr int kNT = BN / 8;          // n8 tiles of S (tokens)
  static constexpr int kPVSteps = BN / 16;    // k16 steps of P V
  static constexpr int kOC = D / 8;           // n8 tiles of O == 16-byte chunks of an fp16 row
  static constexpr int kChunkBytes = BN * kRow;
  // Chunk copies (chunk_loader.cuh); fp16/bf16 tiles land swizzled for ldmatrix.
  using Loader = ChunkLoader<kRow, BN, PAGED, !kQuant>;
  static constexpr int kWarpPipeBytes = STAGES * 2 * kChunkBytes;   // per stage: K chunk, then V chunk
  static_assert(kChunkBytes % 16 == 0, "chunks are copied in 16-byte units");
  // Per-token scales (and int4 shifts) are factored out of the products instead of applied per element:
  // K: S = scale_t * (Q . codes_t) + shift_t * sum(Q);  V: O = sum_t (P scale_t) codes_t + sum_t P shift_t.
  // The codes enter the tensor cores as exact small integers. Per-group scales vary along d, so int4
  // per_group dequantizes element-wise instead.
  static constexpr bool kFoldK = KV == Fmt::int4 && G == Gran::per_token;
  static constexpr bool kFoldV = KV == Fmt::int8 || kFoldK;
  // Folded int4 codes enter as fp16 subnormals (kv_dequant.cuh, int4_pair_subnormal): no subtraction per
  // pair. K: the odd pairs come 16 times larger, so their Q elements are loaded divided by 16 and S
  // takes 2^24 with the token's scale. V: O's columns of odd pairs carry 2^-20, the others 2^-24,
  // restored in finish().
  static constexpr bool kSubnormalInt4 = kFoldK;

  struct Softmax {
    float o[kMT][kOC][4];
    float m[kMT][2];   // running max (log2 units; -inf until a visible token); unified_max: the lane's
                       // largest score, for the flags only (exponents use phi2)
    float l[kMT][2];   // this lane's partial row sum
    float v_shift[kMT][2];   // this lane's partial sum_t P shift_t (int4 per-token V), in O's scale
    float phi2;              // unified_max: the unified max (log2 units)
  };

  // Channel of Q that A-fragment slot `slot` (a0.lo, a0.hi, a2.lo, a2.hi) of k-step `s` holds for a
  // lane at quad position t: the channel the same lane's B fragment decodes from the K row.
  static __device__ __forceinline__ constexpr int q_channel(int s, int t, int slot) {
    if constexpr (KV == Fmt::int4) {
      constexpr int kNibble[4] = {0, 4, 1, 5};
      return 32 * (s / 2) + 8 * t + 2 * (s % 2) + kNibble[slot];
    } else {
      return 16 * s + 4 * t + slot;
    }
  }

  // A plain load from the pipeline's shared memory. Plain C++ (not volatile asm), so the compiler may
  // schedule and merge these loads; the cp.async waits and __syncwarp order them against the copies.
  template <class T>
  static __device__ __forceinline__ T load(const char* p) {
    return *reinterpret_cast<const T*>(p);
  }

  // Output column (n tile c, position p) -> channel; see pv_product_quant for the quantized order.
  static __device__ __forceinline__ int column_channel(int col) {
    if constexpr (kQuant) {
      constexpr int W = (KV == Fmt::int4 || KV == Fmt::flashq) ? 8 : 4;   // channels per V word (pv_product_*)
      const int c = col / 8, p = col % 8;
      return (c / W) * 8 * W + p * W + c % W;
    } else {
      return col;
    }
  }

  // B fragment of k-step s for token row r of the chunk (starting at smem address `row`), lane quad
  // position t.
  static __device__ __forceinline__ void k_fragment(const char* row, int r, int s, int t, u32 (&bk)[2]) {
    if constexpr (KV == Fmt::int4) {
      const u32 w = load<u32>(row + kHdr + (4 * (s / 2) + t) * 4);
      const int k0 = 2 * (s % 2);
      bk[0] = kSubnormalInt4 ? dev::int4_pair_subnormal(w, k0) : dev::int4_pair(w, k0);
      bk[1] = kSubnormalInt4 ? dev::int4_pair_subnormal(w, k0 + 1) : dev::int4_pair(w, k0 + 1);
      if constexpr (!kFoldK) {
        const u32 ss = load<u32>(row + 4 * ((32 * (s / 2) + 8 * t) / kGroupChannels));
        const u32 scale = dev::dup_low_half(ss), shift = dev::dup_high_half(ss);
        bk[0] = dev::hfma2(bk[0], scale, shift);
        bk[1] = dev::hfma2(bk[1], scale, shift);
      }
    } else if constexpr (KV == Fmt::int8) {
      dev::int8x4_to_half2(load<u32>(row + kHdr + (4 * s + t) * 4), bk[0], bk[1]);
    } else if constexpr (KV == Fmt::fp8e4m3) {   // 2^-8 x the codes' values; the head scale folds in later
      dev::e4m3x4_to_half2(load<u32>(row + (4 * s + t) * 4), bk[0], bk[1]);
    } else {
      // Row r of a swizzled tile starts at r * kRow; its chunk c sits at c ^ (r % 8).
      const dev::U32x2 v = load<dev::U32x2>(row + ((2 * s + t / 2) ^ (r & 7)) * 16 + (t % 2) * 8);
      bk[0] = v.x;
      bk[1] = v.y;
    }
  }

  // Every score register set to v, or multiplied by f.
  static __device__ __forceinline__ void fill_scores(float (&s)[kMT][kNT][4], float v) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = v;
  }
  static __device__ __forceinline__ void scale_scores(float (&s)[kMT][kNT][4], float f) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] *= f;
  }

  // S = Q K^T for one chunk, times scale_log2 = softmax_scale * log2 e (and the int8 token scales) in
  // fp32: Q enters the product exactly as given, no second rounding of a pre-scaled copy.
  static __device__ __forceinline__ void qk_product(float (&s)[kMT][kNT][4], const u32 (&qa)[kMT][kSteps][4],
                                                    const char* k_tile, float scale_log2, const float (&q_sum)[kMT][2],
                                                    int lane) {
    const int g = lane / 4, t = lane % 4;
    fill_scores(s, 0.f);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int r = nt * 8 + g;
      const char* row = k_tile + r * kRow;
#pragma unroll
      for (int st = 0; st < kSteps; ++st) {
        u32 bk[2];
        k_fragment(row, r, st, t, bk);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) dev::mma_m16n8k16_f32<kMma>(s[mt][nt], qa[mt][st], bk);
      }
      // Scores of tokens nt*8 + 2t + e (e = 0, 1) for rows g and g + 8 of each m tile.
      const float sc0 = kSubnormalInt4 ? scale_log2 * dev::kInt4Subnormal : scale_log2;
      float sc[2] = {sc0, sc0}, sh[2] = {0.f, 0.f};
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const char* hdr = k_tile + (nt * 8 + 2 * t + e) * kRow;
        if constexpr (KV == Fmt::int8) sc[e] *= load<float>(hdr);
        if constexpr (kFoldK) {
          float scale, shift;
          dev::unpack_half2(load<u32>(hdr), scale, shift);
          sc[e] *= scale;
          sh[e] = shift * scale_log2;
        }
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = s[mt][nt][half * 2 + e];
            x = kFoldK ? fmaf(x, sc[e], sh[e] * q_sum[mt][half]) : x * sc[e];
          }
    }
  }

  // Scores of tokens a row may not see become -inf (a select, so garbage or NaN in unused rows of a
  // straddling group never survives).
  static __device__ __forceinline__ void apply_mask(float (&s)[kMT][kNT][4], int t0, int len, int row0, int gqa,
                                                    int q_len, int lane) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row0 + mt * 16 + lane / 4 + half * 8;
        const int limit = CAUSAL ? min(len, len - q_len + 1 + row / gqa) : len;   // tokens < limit are seen
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (t0 + nt * 8 + (lane % 4) * 2 + e >= limit) s[mt][nt][half * 2 + e] = dev::neg_inf();
      }
  }

  // e^x of a score difference given in log2 units (x2 = x * log2 e): ex2 on the SFU, or TurboAttention's
  // SAS (LUT + fp16 cubic, 0 below -6; sas.h) for softmax=sas. The merges of warps and splits stay exact.
  static __device__ __forceinline__ float exp_of_log2(float x2) {
    if constexpr (SMX == SoftmaxMode::sas) return sas::exp(x2 * dev::kLn2);
    else return dev::exp2_approx(x2);
  }

  static __device__ __forceinline__ void softmax_update(float (&s)[kMT][kNT][4], Softmax& st) {
    if constexpr (SMX == SoftmaxMode::unified_max) {
      // FlashDecoding++: p = 2^(x2 - phi2) against one constant phi2 and l += p; nothing to rescale, no
      // shuffle. The lane's largest score is kept for the row flags (finish()); masked scores are -inf
      // (p = 0, and they never raise the maximum).
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          float mx = st.m[mt][half], sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& x = s[mt][nt][half * 2 + e];
              mx = fmaxf(mx, x);
              x = dev::exp2_approx(x - st.phi2);
              sum += x;
            }
          st.m[mt][half] = mx;
          st.l[mt][half] += sum;
        }
      return;
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float mx = st.m[mt][half];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][half * 2], s[mt][nt][half * 2 + 1]));
        mx = dev::quad_max(mx);
        // A row with only masked tokens so far keeps max -inf; subtracting 0 keeps NaN out.
        const float m_use = mx == dev::neg_inf() ? 0.f : mx;
        const float alpha = exp_of_log2(st.m[mt][half] - m_use);
        st.m[mt][half] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          float& s0 = s[mt][nt][half * 2];
          float& s1 = s[mt][nt][half * 2 + 1];
          if constexpr (SMX == SoftmaxMode::sas) {   // two scores per packed fp16 step
            sas::exp2x((s0 - m_use) * dev::kLn2, (s1 - m_use) * dev::kLn2, s0, s1);
          } else {
            s0 = dev::exp2_approx(s0 - m_use);
            s1 = dev::exp2_approx(s1 - m_use);
          }
          sum += s0 + s1;
        }
        st.l[mt][half] = st.l[mt][half] * alpha + sum;
        st.v_shift[mt][half] *= alpha;
        // Past the first chunks the running max rarely rises: skip the O rescale when no row of the
        // warp's (mt, half) rows moved (alpha == 1 exactly: exp2(0)).
        if (__any_sync(0xffffffffu, alpha != 1.f))
#pragma unroll
          for (int c = 0; c < kOC; ++c) {
            st.o[mt][c][half * 2] *= alpha;
            st.o[mt][c][half * 2 + 1] *= alpha;
          }
      }
  }

  // Folds the per-token V scales into P (and sums P * shift for int4) for tokens nt*8 + 2t + e. Rows
  // at or past len carry garbage headers: their P is 0 and their scale and shift are taken as 0.
  static __device__ __forceinline__ void fold_v_scales(float (&s)[kMT][kNT][4], Softmax& st, const char* v_tile,
                                                       int t0, int len, int lane) {
    const int t = lane % 4;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int r = nt * 8 + 2 * t + e;
        const bool valid = t0 + r < len;
        const char* hdr = v_tile + r * kRow;
        float scale = 0.f, shift = 0.f;
        if constexpr (KV == Fmt::int8) scale = load<float>(hdr);
        else dev::unpack_half2(load<u32>(hdr), scale, shift);
        scale = valid ? scale : 0.f;
        shift = valid ? shift : 0.f;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            float& pr = s[mt][nt][half * 2 + e];
            if constexpr (KV == Fmt::int4) st.v_shift[mt][half] = fmaf(pr, shift, st.v_shift[mt][half]);
            pr *= scale;
          }
      }
  }

  // The A fragments of P for k16 step kk: the S accumulators of n tiles 2kk and 2kk + 1 (C layout ==
  // A layout), converted to the product's element type.
  static __device__ __forceinline__ void p_fragments(const float (&s)[kMT][kNT][4], int kk, u32 (&pa)[kMT][4]) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      pa[mt][0] = dev::pack2<kMma>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
      pa[mt][1] = dev::pack2<kMma>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
      pa[mt][2] = dev::pack2<kMma>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
      pa[mt][3] = dev::pack2<kMma>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
    }
  }

  // pair of fp16 (lo from a, hi from b) from byte k of two words, for the int8 path: bytes of a and b
  // interleaved next to the exponent byte 0x64, then 1152 subtracted (a and b carry the ^0x80 bias).
  static __device__ __forceinline__ u32 int8_pair(u32 ab_interleaved, int k) {
    // ab_interleaved = [a.b(2i), b.b(2i), a.b(2i+1), b.b(2i+1)]; k = 0 or 1 picks the byte pair.
    return dev::hsub2(dev::prmt(ab_interleaved, dev::kHalf2_1024, k == 0 ? 0x5150u : 0x5352u), dev::kHalf2_1152);
  }

  // V fragments (B operand, k16 tokens x n8 channels) of a quantized cache, decoded straight from the
  // raw rows: a B register pairs two tokens of one channel, and a 32-bit word of a row holds 4 (int8) or
  // 8 (int4) channels of one token, so the lane at n position g reads the word of channels
  // [g * W, g * W + W) (W channels per word) of its 4 tokens, and n tile j of channel block J holds
  // channel J * 8W + g * W + j. The output columns are mapped back in column_channel().
  // Tokens at or past len (inside a straddling group) read as zero (their P is 0, and for int4
  // per_group their garbage scale could be NaN).
  static constexpr int kVWordChannels = KV == Fmt::int4 ? 8 : 4;
  static constexpr int kVBlocks = D / (8 * kVWordChannels);

  static __device__ __forceinline__ void pv_product_quant(const float (&s)[kMT][kNT][4], Softmax& st,
                                                          const char* v_tile, int t0, int len, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      u32 pa[kMT][4];
      p_fragments(s, kk, pa);
      // The lane's tokens: k positions 2t, 2t+1 (b0) and 2t+8, 2t+9 (b1) of this k16 step.
      const int r[4] = {16 * kk + 2 * t, 16 * kk + 2 * t + 1, 16 * kk + 2 * t + 8, 16 * kk + 2 * t + 9};
      bool valid[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) valid[e] = t0 + r[e] < len;
#pragma unroll
      for (int J = 0; J < kVBlocks; ++J) {
        u32 w[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          w[e] = load<u32>(v_tile + r[e] * kRow + kHdr + 4 * (J * 8 + g));
          if constexpr (!kFoldV) w[e] = valid[e] ? w[e] : 0u;
        }
        u32 b[kVWordChannels][2];   // [j][b0 | b1]
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const u32 a = w[2 * half], c = w[2 * half + 1];
          if constexpr (KV == Fmt::int8) {
            const u32 lo = dev::prmt(a ^ 0x80808080u, c ^ 0x80808080u, 0x5140u);   // bytes 0, 1 of a and c
            const u32 hi = dev::prmt(a ^ 0x80808080u, c ^ 0x80808080u, 0x7362u);   // bytes 2, 3
            b[0][half] = int8_pair(lo, 0);
            b[1][half] = int8_pair(lo, 1);
            b[2][half] = int8_pair(hi, 0);
            b[3][half] = int8_pair(hi, 1);
          } else if constexpr (KV == Fmt::fp8e4m3) {
#pragma unroll
            for (int k = 0; k < 4; ++k)   // byte k of a and c into bytes 1 and 3: channel k of both tokens
              b[k][half] = dev::e4m3_bytes13_to_half2(dev::prmt(a, c, 0x4000u + 0x1111u * k));
          } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) {   // byte k of a and c: channels 2k, 2k + 1
              const u32 y = dev::prmt(a, c, 0x4400u + 0x1111u * k);   // [a.bk, a.bk, c.bk, c.bk]
              if constexpr (kSubnormalInt4) {   // low nibbles 2^-24 q, high nibbles 2^-20 q (finish() restores)
                b[2 * k][half] = y & 0x000F000Fu;
                b[2 * k + 1][half] = y & 0x00F000F0u;
              } else {
                b[2 * k][half] = dev::hsub2((y & 0x000F000Fu) | dev::kHalf2_1024, dev::kHalf2_1024);
                b[2 * k + 1][half] = dev::hsub2(((y >> 4) & 0x000F000Fu) | dev::kHalf2_1024, dev::kHalf2_1024);
              }
            }
            if constexpr (!kFoldV) {   // per group: (scale, shift) of the two tokens of each register
              const int group = (J * 8 * kVWordChannels + g * kVWordChannels) / kGroupChannels;
              u32 hdr_a = load<u32>(v_tile + r[2 * half] * kRow + 4 * group);
              u32 hdr_c = load<u32>(v_tile + r[2 * half + 1] * kRow + 4 * group);
              hdr_a = valid[2 * half] ? hdr_a : 0u;
              hdr_c = valid[2 * half + 1] ? hdr_c : 0u;
              const u32 scale = dev::prmt(hdr_a, hdr_c, 0x5410u), shift = dev::prmt(hdr_a, hdr_c, 0x7632u);
#pragma unroll
              for (int j = 0; j < kVWordChannels; ++j) b[j][half] = dev::hfma2(b[j][half], scale, shift);
            }
          }
        }
#pragma unroll
        for (int j = 0; j < kVWordChannels; ++j)
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) dev::mma_m16n8k16_f32<kMma>(st.o[mt][J * kVWordChannels + j], pa[mt], b[j]);
      }
    }
  }

  // fp16/bf16 V chunk read in place: rows at or past len (inside a straddling group) are zeroed.
  static __device__ __forceinline__ void zero_tail_rows(u32 v_tile, int t0, int len, int lane) {
    const int first = len - t0;
    if (first >= BN) return;
    const dev::U32x4 zero = {0u, 0u, 0u, 0u};
    for (int i = lane; i < (BN - first) * kOC; i += 32) {
      const int r = first + i / kOC, c = i % kOC;
      dev::st_shared_16(v_tile + dev::swizzled_offset<kOC>(r, c), zero);
    }
  }

  // O += P V for one chunk; V fragments by ldmatrix.trans from a swizzled fp16/bf16 tile.
  static __device__ __forceinline__ void pv_product(const float (&s)[kMT][kNT][4], Softmax& st, u32 v_tile,
                                                    const u32 (&v_lane)[4]) {
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      u32 pa[kMT][4];
      p_fragments(s, kk, pa);
#pragma unroll
      for (int dp = 0; dp < kOC / 2; ++dp) {
        u32 vb[4];
        dev::ldmatrix_x4_trans(vb, v_tile + v_lane[dp % 4] + (dp / 4) * 128 + kk * 16 * kOC * 16);
        const u32 b0[2] = {vb[0], vb[1]};
        const u32 b1[2] = {vb[2], vb[3]};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          dev::mma_m16n8k16_f32<kMma>(st.o[mt][2 * dp], pa[mt], b0);
          dev::mma_m16n8k16_f32<kMma>(st.o[mt][2 * dp + 1], pa[mt], b1);
        }
      }
    }
  }

  // ---- FlashQ (KV == flashq): a chunk is one 64-token block of K and one of V (kv_layout.h), computed
  // on in steps of BN tokens; KB / VB are the head's bit widths (2 or 4; run() dispatches on them). The
  // codes decode to the block's INT8 values s_c * code + m_c (exact fp16 integers) through the block's
  // parameter table (flashq_dequant.cuh); the blocks' alphas scale S (K) and fold into P (V). Blocks
  // hold whole blocks of valid tokens, and the new tokens are in the INT8 buffer (decoded by the int8
  // kernel), so nothing here is masked.
  static constexpr int kFqStage = kv::flashq_block_bytes(4, D);   // the K (or V) area of a stage

  // Channel of Q that A-fragment slot `slot` of k-step s holds for quad position t, the channel the
  // lane's B fragment decodes from a KB-bit code row: int4 words give (c_k, c_k+4), int2 words (c_k, c_k+8).
  template <int KB>
  static __device__ __forceinline__ constexpr int fq_q_channel(int s, int t, int slot) {
    if constexpr (KB == 4) {
      constexpr int kNibble[4] = {0, 4, 1, 5};
      return 32 * (s / 2) + 8 * t + 2 * (s % 2) + kNibble[slot];
    } else {
      constexpr int kCrumb[4] = {0, 8, 1, 9};
      return 64 * (s / 4) + 16 * t + 2 * (s % 4) + kCrumb[slot];
    }
  }


  // S = Q K^T for block tokens [r0, r0 + BN), times scale_log2 * alpha_k. Steps outer, tokens inner, so
  // each step's (s, m) pairs are fetched once.
  template <int KB>
  static __device__ __forceinline__ void fq_qk_product(float (&s)[kMT][kNT][4], const u32 (&qa)[kMT][kSteps][4],
                                                       const char* block, const u32* table, int r0, float scale_log2,
                                                       int lane) {
    constexpr int kCodeRow = kv::flashq_code_row_bytes(KB, D);
    const char* codes = block + kv::flashq_codes_offset(D);
    const int g = lane / 4, t = lane % 4;
    fill_scores(s, 0.f);
#pragma unroll
    for (int st = 0; st < kSteps; ++st) {
      u32 sc[2], mc[2];
      dev::flashq_pair_params(table, fq_q_channel<KB>(st, t, 0), fq_q_channel<KB>(st, t, 1), sc[0], mc[0]);
      dev::flashq_pair_params(table, fq_q_channel<KB>(st, t, 2), fq_q_channel<KB>(st, t, 3), sc[1], mc[1]);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const char* row = codes + (r0 + nt * 8 + g) * kCodeRow;
        u32 bk[2];
        if constexpr (KB == 4) {
          const u32 w = load<u32>(row + (4 * (st / 2) + t) * 4);
          bk[0] = dev::int4_pair(w, 2 * (st % 2));
          bk[1] = dev::int4_pair(w, 2 * (st % 2) + 1);
        } else {
          const u32 w = load<u32>(row + (4 * (st / 4) + t) * 4);
          bk[0] = dev::int2_pair(w, 2 * (st % 4));
          bk[1] = dev::int2_pair(w, 2 * (st % 4) + 1);
        }
        bk[0] = dev::hfma2(bk[0], sc[0], mc[0]);
        bk[1] = dev::hfma2(bk[1], sc[1], mc[1]);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) dev::mma_m16n8k16_f32<kMma>(s[mt][nt], qa[mt][st], bk);
      }
    }
    scale_scores(s, scale_log2 * dev::flashq_alpha(block));
  }

  // O += P V for block tokens [r0, r0 + BN) (P already times alpha_v). Lane g reads, per token, the
  // 8 channels [J * 64 + g * 8, +8) of its tokens' code rows (a 32-bit word of int4, 16 bits of int2),
  // the layout of pv_product_quant's int4 path, so column_channel() maps the output back the same way.
  template <int VB>
  static __device__ __forceinline__ void fq_pv_product(const float (&s)[kMT][kNT][4], Softmax& st, const char* block,
                                                       const u32* table, int r0, int lane) {
    constexpr int kCodeRow = kv::flashq_code_row_bytes(VB, D);
    const char* codes = block + kv::flashq_codes_offset(D);
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int J = 0; J < D / 64; ++J) {
      u32 sd[8], md[8];   // (s, s) and (m, m) of the lane's 8 channels
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const u32 e = table[J * 64 + g * 8 + j];
        sd[j] = dev::dup_low_half(e);
        md[j] = dev::dup_high_half(e);
      }
#pragma unroll
      for (int kk = 0; kk < kPVSteps; ++kk) {
        u32 pa[kMT][4];
        p_fragments(s, kk, pa);
        const int r[4] = {r0 + 16 * kk + 2 * t, r0 + 16 * kk + 2 * t + 1, r0 + 16 * kk + 2 * t + 8,
                          r0 + 16 * kk + 2 * t + 9};
        u32 w[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if constexpr (VB == 4) w[e] = load<u32>(codes + r[e] * kCodeRow + 4 * (J * 8 + g));
          else w[e] = load<u16>(codes + r[e] * kCodeRow + 2 * (J * 8 + g));
        }
        u32 bv[8][2];   // [channel j][b0 | b1]
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const u32 a = w[2 * half], c = w[2 * half + 1];
#pragma unroll
          for (int k = 0; k < VB; ++k) {   // byte k of a and c: channels 8k/VB .. of both tokens
            const u32 y = dev::prmt(a, c, 0x4400u + 0x1111u * k);   // [a.bk, a.bk, c.bk, c.bk]
            if constexpr (VB == 4) {
              bv[2 * k][half] = dev::hsub2((y & 0x000F000Fu) | dev::kHalf2_1024, dev::kHalf2_1024);
              bv[2 * k + 1][half] = dev::hsub2(((y >> 4) & 0x000F000Fu) | dev::kHalf2_1024, dev::kHalf2_1024);
            } else {
#pragma unroll
              for (int i = 0; i < 4; ++i)
                bv[4 * k + i][half] = dev::hsub2(((y >> (2 * i)) & 0x00030003u) | dev::kHalf2_1024, dev::kHalf2_1024);
            }
          }
#pragma unroll
          for (int j = 0; j < 8; ++j) bv[j][half] = dev::hfma2(bv[j][half], sd[j], md[j]);
        }
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) dev::mma_m16n8k16_f32<kMma>(st.o[mt][J * 8 + j], pa[mt], bv[j]);
      }
    }
  }

  // O *= f (a per-head V scale factored out of the whole product).
  static __device__ __forceinline__ void scale_output(Softmax& st, float f) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int c = 0; c < kOC; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) st.o[mt][c][e] *= f;
  }

  // The A fragments of this CTA's query rows, in the channel order of k_fragment.
  // q_sum: per row, the sum of the (rounded) Q elements, for the factored-out int4 K shift.
  // KB: flashq's K bit width (its own channel order), 0 otherwise.
  template <int KB = 0>
  static __device__ __forceinline__ void load_q(const DecodeParams& p, u32 (&qa)[kMT][kSteps][4],
                                                float (&q_sum)[kMT][2], int b, int h, int row0, int rows, int lane) {
    const int gqa = p.heads_q / p.heads_kv;
    const int t = lane % 4;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row0 + mt * 16 + lane / 4 + half * 8;
        const bool valid = row < rows;
        float sum = 0.f;
        const u16* q = static_cast<const u16*>(p.q.ptr) + (long long)b * p.q.sb +
                       (long long)(h * gqa + (valid ? row % gqa : 0)) * p.q.sh + (long long)(valid ? row / gqa : 0) * p.q.ss;
#pragma unroll
        for (int st = 0; st < kSteps; ++st) {
          float x[4];
#pragma unroll
          for (int slot = 0; slot < 4; ++slot)
            x[slot] = valid ? dev::to_float<OUT>(q[KB ? fq_q_channel<KB>(st, t, slot) : q_channel(st, t, slot)]) : 0.f;
          // Subnormal int4 K: slots 2 and 3 meet the odd pairs (16 times their codes), so 1/16 of Q.
          const float odd = KB == 0 && kSubnormalInt4 ? 0.0625f : 1.f;
          qa[mt][st][half] = dev::pack2<kMma>(x[0], x[1]);
          qa[mt][st][2 + half] = dev::pack2<kMma>(x[2] * odd, x[3] * odd);
          float lo, hi;
          dev::unpack2<kMma>(qa[mt][st][half], lo, hi);
          sum += lo + hi;
          dev::unpack2<kMma>(qa[mt][st][2 + half], lo, hi);
          sum += (lo + hi) / odd;   // the sum of the Q the products use
        }
        q_sum[mt][half] = dev::quad_sum(sum);
      }
  }

  // Merges the warps' states and writes the output (one split) or the split's partial (slot
  // split_base + split). unified_max: every warp's partial is against phi2, so the merge is a plain sum,
  // and one thread per row ORs the row's flags (its largest score against the window) into row_flags:
  // one atomic per row and CTA. fallback_only (the exact pass after a unified-max one): only the rows
  // whose flags are not exactly kUmSeen are written.
  static __device__ void finish(const DecodeParams& p, Softmax& st, char* smem, int b, int h, int split, int row0,
                                int rows, int warp, int lane) {
    float* mo = reinterpret_cast<float*>(smem);   // [WARPS][BM][D]
    float* mm = mo + WARPS * BM * D;              // [WARPS][BM]
    float* ml = mm + WARPS * BM;                  // [WARPS][BM]
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = mt * 16 + g + half * 8;
        const float l = dev::quad_sum(st.l[mt][half]);
        if constexpr (KV == Fmt::int4 && kFoldV) {
          const float shift = dev::quad_sum(st.v_shift[mt][half]);
#pragma unroll
          for (int c = 0; c < kOC; ++c) {
            // n tile c holds pair c % 8 of its V words: odd pairs 2^-20 codes, even ones 2^-24.
            const float f = kSubnormalInt4 ? ((c % kVWordChannels) % 2 ? dev::kInt4Subnormal / 16.f : dev::kInt4Subnormal) : 1.f;
            st.o[mt][c][half * 2] = fmaf(st.o[mt][c][half * 2], f, shift);
            st.o[mt][c][half * 2 + 1] = fmaf(st.o[mt][c][half * 2 + 1], f, shift);
          }
        }
        float m_row = st.m[mt][half];
        if constexpr (SMX == SoftmaxMode::unified_max) m_row = dev::quad_max(m_row);   // per lane until here
        if (t == 0) {
          mm[warp * BM + row] = m_row;
          ml[warp * BM + row] = l;
        }
#pragma unroll
        for (int c = 0; c < kOC; ++c) {
          mo[(warp * BM + row) * D + c * 8 + 2 * t] = st.o[mt][c][half * 2];
          mo[(warp * BM + row) * D + c * 8 + 2 * t + 1] = st.o[mt][c][half * 2 + 1];
        }
      }
    __syncthreads();
    const int gqa = p.heads_q / p.heads_kv;
    for (int idx = threadIdx.x; idx < BM * D; idx += kThreads) {
      const int row = idx / D, col = idx % D;
      if (row0 + row >= rows) continue;
      float m = dev::neg_inf();
#pragma unroll
      for (int w = 0; w < WARPS; ++w) m = fmaxf(m, mm[w * BM + row]);
      const int hq = h * gqa + (row0 + row) % gqa, i = (row0 + row) / gqa;
      const long long out_row = ((long long)b * p.heads_q + hq) * p.q_len + i;
      if constexpr (SMX == SoftmaxMode::exact)
        if (p.fallback_only && p.row_flags[out_row] == kUmSeen) continue;   // the unified-max result stands
      if constexpr (SMX == SoftmaxMode::unified_max) {
        // x - phi >= hi for the largest score <=> for some score (subtraction is monotone); -inf: no flag.
        if (col == 0) {
          const float top = m - st.phi2;
          const int flags = (top >= p.um_hi2 ? kUmOverflow : 0) | (top > p.um_lo2 ? kUmSeen : 0);
          if (flags != 0) atomicOr(p.row_flags + out_row, flags);
        }
        m = st.phi2;
      }
      float acc = 0.f, sum = 0.f;
      if (m != dev::neg_inf())
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
          const float f = SMX == SoftmaxMode::unified_max ? 1.f : dev::exp2_approx(mm[w * BM + row] - m);
          acc += f * mo[(w * BM + row) * D + col];
          sum += f * ml[w * BM + row];
        }
      const float value = sum > 0.f ? acc / sum : 0.f;
      const float lse2 = sum > 0.f ? m + dev::log2_approx(sum) : dev::neg_inf();
      const int ch = column_channel(col);
      const int slot = p.split_base + split;
      if (p.splits == 1) {
        u16* o = static_cast<u16*>(p.o.ptr) + (long long)b * p.o.sb + (long long)hq * p.o.sh + (long long)i * p.o.ss;
        o[ch] = dev::from_float<OUT>(value);
        if (col == 0 && p.lse != nullptr) p.lse[out_row] = lse2 * dev::kLn2;
      } else {
        p.part_o[(out_row * p.splits + slot) * D + ch] = value;
        if (col == 0) p.part_lse[out_row * p.splits + slot] = lse2;
      }
    }
  }

 // The CTA's place in the grid (abi.h, DecodeParams): split x, KV head and row block y, sequence z.
  struct Cta {
    int warp, lane, split, b, h, row0, gqa, rows, len, start, end;
  };

  // Fills c; false when the CTA has nothing to do: its split starts past the sequence (the combine
  // kernel reads only the splits that hold tokens), or it is the exact pass after a unified-max one
  // (fallback_only) and none of its rows is flagged.
  static __device__ __forceinline__ bool setup(const DecodeParams& p, Cta& c) {
    c.warp = threadIdx.x / 32;
    c.lane = threadIdx.x % 32;
    c.split = blockIdx.x;
    c.b = blockIdx.z;
    c.gqa = p.heads_q / p.heads_kv;
    c.rows = c.gqa * p.q_len;
    const int row_blocks = (c.rows + BM - 1) / BM;
    c.h = blockIdx.y / row_blocks;
    c.row0 = (blockIdx.y % row_blocks) * BM;
    c.len = p.kv_lens[c.b];
    c.start = c.split * p.split_tokens;
    if (c.start >= c.len) return false;
    c.end = min(c.len, c.start + p.split_tokens);
    if constexpr (SMX == SoftmaxMode::exact)
      if (p.fallback_only) {
        const int r = c.row0 + int(threadIdx.x);
        bool flagged = false;
        if (threadIdx.x < BM && r < c.rows)
          flagged = p.row_flags[((long long)c.b * p.heads_q + c.h * c.gqa + r % c.gqa) * p.q_len + r / c.gqa] != kUmSeen;
        if (!__syncthreads_or(flagged)) return false;
      }
    return true;
  }

  static __device__ __forceinline__ void init_state(const DecodeParams& p, Softmax& st) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int c = 0; c < kOC; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) st.o[mt][c][e] = 0.f;
      st.m[mt][0] = st.m[mt][1] = dev::neg_inf();
      st.l[mt][0] = st.l[mt][1] = 0.f;
      st.v_shift[mt][0] = st.v_shift[mt][1] = 0.f;
    }
    st.phi2 = p.um_phi2;
  }

  // Every format but flashq: chunks of BN cache rows.
  static __device__ void run_rows(const DecodeParams& p, char* smem) {
    Cta c;
    if (!setup(p, c)) return;
    const int warp = c.warp, lane = c.lane, b = c.b, h = c.h, row0 = c.row0, gqa = c.gqa, len = c.len;
    const int n_chunks = (c.end - c.start + BN - 1) / BN;
    const int my_chunks = warp < n_chunks ? (n_chunks - warp + WARPS - 1) / WARPS : 0;
    // Tokens every row of this CTA may see; chunks reaching past it need the mask.
    const int seen_by_all = CAUSAL ? min(len, len - p.q_len + 1 + row0 / gqa) : len;

    const u32 pipe = dev::smem_addr(smem) + warp * kWarpPipeBytes;
    const char* pipe_ptr = smem + warp * kWarpPipeBytes;   // the same memory, for plain loads
    auto chunk_t0 = [&](int i) { return c.start + (warp + i * WARPS) * BN; };
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) {
      if (i < my_chunks) Loader::load_chunk(p, pipe + i * 2 * kChunkBytes, pipe + i * 2 * kChunkBytes + kChunkBytes, b, h,
                                    chunk_t0(i), len, lane);
      dev::cp_async_commit();
    }

    u32 qa[kMT][kSteps][4];
    float q_sum[kMT][2];
    load_q(p, qa, q_sum, b, h, row0, c.rows, lane);
    float scale_log2 = p.softmax_scale * dev::kLog2e;
    if constexpr (KV == Fmt::fp8e4m3) scale_log2 *= p.k_head_scale[h] * dev::kE4m3HalfFactor;

    // ldmatrix.trans row addresses of the V tiles (see prefill_fp16.cuh): lanes 8i..8i+7 address
    // tile i = (tokens 0-7 | 8-15) x (channels 0-7 | 8-15).
    u32 v_lane[4];
    {
      const int v_row = lane % 8 + ((lane / 8) % 2) * 8;
#pragma unroll
      for (int j = 0; j < 4; ++j) v_lane[j] = u32(v_row * kOC + ((2 * j + lane / 16) ^ (lane % 8))) * 16u;
    }

    Softmax st;
    init_state(p, st);
    for (int i = 0; i < my_chunks; ++i) {
      {
        const int next = i + STAGES - 1;
        const u32 dst = pipe + (next % STAGES) * 2 * kChunkBytes;
        if (next < my_chunks) Loader::load_chunk(p, dst, dst + kChunkBytes, b, h, chunk_t0(next), len, lane);
        dev::cp_async_commit();
      }
      dev::cp_async_wait<STAGES - 1>();
      __syncwarp();
      const int t0 = chunk_t0(i);
      const u32 k_tile = pipe + (i % STAGES) * 2 * kChunkBytes;
      const char* k_ptr = pipe_ptr + (i % STAGES) * 2 * kChunkBytes;
      const u32 v_tile = k_tile + kChunkBytes;
      if constexpr (!kQuant) zero_tail_rows(v_tile, t0, len, lane);
      float s[kMT][kNT][4];
      qk_product(s, qa, k_ptr, scale_log2, q_sum, lane);
      if (t0 + BN > seen_by_all) apply_mask(s, t0, len, row0, gqa, p.q_len, lane);
      softmax_update(s, st);
      if constexpr (kFoldV) fold_v_scales(s, st, k_ptr + kChunkBytes, t0, len, lane);
      if constexpr (kQuant) {
        pv_product_quant(s, st, k_ptr + kChunkBytes, t0, len, lane);
      } else {
        __syncwarp();   // zeroed rows visible to the whole warp
        pv_product(s, st, v_tile, v_lane);
      }
      __syncwarp();   // every lane is done with this stage before it is refilled
    }
    dev::cp_async_wait_all();
    if constexpr (KV == Fmt::fp8e4m3) scale_output(st, p.v_head_scale[h] * dev::kE4m3HalfFactor);
    __syncthreads();   // the pipeline memory becomes the merge area
    finish(p, st, smem, b, h, c.split, row0, c.rows, warp, lane);
  }

  // flashq: chunks of one 64-token block (split_tokens and kv_lens are multiples of 64), KB / VB bits.
  template <int KB, int VB>
  static __device__ void run_blocks(const DecodeParams& p, char* smem) {
    Cta c;
    if (!setup(p, c)) return;
    const int warp = c.warp, lane = c.lane, b = c.b, h = c.h;
    constexpr int kBlock = kv::kFlashQBlock;
    const int first_block = c.start / kBlock, n_chunks = (c.end - c.start) / kBlock;
    const int my_chunks = warp < n_chunks ? (n_chunks - warp + WARPS - 1) / WARPS : 0;
    const int off_k = p.fq_heads[2 * h + 1], off_v = p.fq_heads[2 * (p.heads_kv + h) + 1];

    constexpr int kStage = 2 * kFqStage, kPipe = STAGES * kStage;
    const u32 pipe = dev::smem_addr(smem) + warp * kPipe;
    const char* pipe_ptr = smem + warp * kPipe;
    u32* table_k = reinterpret_cast<u32*>(smem + WARPS * kPipe + warp * 2 * D * 4);
    u32* table_v = table_k + D;
    auto block_of = [&](int i) { return first_block + warp + i * WARPS; };
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) {
      if (i < my_chunks) dev::flashq_load_block<D, PAGED, KB, VB>(p, pipe + i * kStage, pipe + i * kStage + kFqStage, b, block_of(i), off_k, off_v, lane);
      dev::cp_async_commit();
    }

    u32 qa[kMT][kSteps][4];
    float q_sum[kMT][2];
    load_q<KB>(p, qa, q_sum, b, h, c.row0, c.rows, lane);
    const float scale_log2 = p.softmax_scale * dev::kLog2e;

    Softmax st;
    init_state(p, st);
    for (int i = 0; i < my_chunks; ++i) {
      {
        const int next = i + STAGES - 1;
        const u32 dst = pipe + (next % STAGES) * kStage;
        if (next < my_chunks) dev::flashq_load_block<D, PAGED, KB, VB>(p, dst, dst + kFqStage, b, block_of(next), off_k, off_v, lane);
        dev::cp_async_commit();
      }
      dev::cp_async_wait<STAGES - 1>();
      __syncwarp();
      const char* k_block = pipe_ptr + (i % STAGES) * kStage;
      const char* v_block = k_block + kFqStage;
      dev::flashq_param_table<D>(k_block, table_k, lane);
      dev::flashq_param_table<D>(v_block, table_v, lane);
      __syncwarp();
      const float alpha_v = dev::flashq_alpha(v_block);
#pragma unroll 1
      for (int r0 = 0; r0 < kBlock; r0 += BN) {
        float s[kMT][kNT][4];
        fq_qk_product<KB>(s, qa, k_block, table_k, r0, scale_log2, lane);
        softmax_update(s, st);
        scale_scores(s, alpha_v);
        fq_pv_product<VB>(s, st, v_block, table_v, r0, lane);
      }
      __syncwarp();   // every lane is done with this stage and the tables before they are refilled
    }
    dev::cp_async_wait_all();
    __syncthreads();   // the pipeline memory becomes the merge area
    finish(p, st, smem, b, h, c.split, c.row0, c.rows, warp, lane);
  }

 public:
  static __device__ void run(const DecodeParams& p, char* smem) {
    if constexpr (KV == Fmt::flashq) {
      // The head's bit widths pick one of four specialisations (uniform over the CTA).
      const int h = blockIdx.y / ((p.heads_q / p.heads_kv * p.q_len + BM - 1) / BM);
      const int kb = p.fq_heads[2 * h], vb = p.fq_heads[2 * (p.heads_kv + h)];
      if (kb == 4 && vb == 4) run_blocks<4, 4>(p, smem);
      else if (kb == 4) run_blocks<4, 2>(p, smem);
      else if (vb == 4) run_blocks<2, 4>(p, smem);
      else run_blocks<2, 2>(p, smem);
    } else {
      run_rows(p, smem);
    }
  }
};

}  // namespace qattn::decode

// INT8 prefill attention (INT-FlashAttention): both Q·K^T and P·V run on int8 tensor cores
// (mma.sync m16n8k32, int32 accumulate), FlashAttention-2 style: one CTA per (query tile, head, batch),
// each warp owns 16 or 32 query rows, K / V^T tiles stream through a cp.async ring.
//
// Numerics, per query row (all logits in base 2):
//   u     = (Q̂·K̂^T) · k_scale[key]                      int32 -> fp32 (bias trick, no conversion)
//   L     = u · q_scale[row] · softmax_scale · log2(e)
//   R     = reference max: raised to (tile max + kHeadroom) only when a tile's max exceeds it
//   P̂     = round(254.51 · 2^(L - R)) ∈ [0, 255]          u8 operand of the P·V mma
//   O     += P̂·V̂   in the mma's own int32 accumulators, exact over the whole row
//   l     += Σ P̂   (dp4a on the packed bytes)
//   when R rises by Δ:  O, l <- round(O · 2^-Δ), round(l · 2^-Δ)   (rare: the headroom absorbs
//                       small rises, so most tiles do no per-element floating point work on O)
//   out   = O · v_scale[c] / l (+ v_mean[c])
// Compared with the paper (P̂ = round(127 · exp(S - m)) against the running max, P̂·V converted and
// rescaled into an fp32 O every tile): P is unsigned with 255 levels (mma .u8.s8), O stays int32, and
// the fp32 work per tile shrinks to the logits and the exponentials, which is where the time goes
// once the matmuls are int8. l sums the same quantized P̂ that multiply V (see QATTN_INT8_EXACT_L).
//
// Overflow: |S| <= d · 128² < 2^22 (bias trick); a thread's share of l is kept <= 2^21 by an extra
// halving of R, so |O| <= 127 · 4 · (2^21 + 255 · bn / 4) < 2^31.
//
// Masking: keys >= kv_len and, when CAUSAL, keys > row + (kv_len - q_len) get P̂ = 0 exactly; rows that
// see no key write zeros (lse = -inf). Tiles that need no mask take a mask-free path.
// lse is that of the logits the kernel sees: with K smoothing (K - mean_k) it lacks the per-row
// constant softmax_scale · q·mean_k, which the caller adds back if it needs the true value.
//
// Requirements on the tensors (see abi.h): Q, K, O rows contiguous (sc = 1); V^T rows (sc = row stride)
// zero-padded to kVPadTokens tokens; every row start 16-byte aligned (int8 tensors) or 4-byte aligned
// (O); softmax_scale > 0.
#pragma once

#include "qattn/abi.h"
#include "qattn/attention/prefill_int8_shape.h"
#include "qattn/common/int8_ptx.cuh"

// Development knobs, left at their defaults by the generator: P levels (255: u8, 127: the paper's
// range), the exact (unquantized) row sum instead of the quantized one, and the headroom (log2 units)
// added to R when it rises.
#ifndef QATTN_INT8_P_LEVELS
#define QATTN_INT8_P_LEVELS 255
#endif
#ifndef QATTN_INT8_EXACT_L
#define QATTN_INT8_EXACT_L 0
#endif
#ifndef QATTN_INT8_EX2_F16
#define QATTN_INT8_EX2_F16 0
#endif
#ifndef QATTN_INT8_HEADROOM
#define QATTN_INT8_HEADROOM 1.0f
#endif

namespace qattn {
namespace prefill_int8 {

#if QATTN_INT8_P_LEVELS == 255
// Slightly under 255 so that fp32 rounding of the tile max can never produce 256 (a wrapped byte).
constexpr float kPScale = 254.51f;
constexpr float kLog2PScale = 7.9915785f;
#else
constexpr float kPScale = 127.0f;
constexpr float kLog2PScale = 6.9886847f;
#endif
constexpr float kHeadroom = QATTN_INT8_HEADROOM;
constexpr unsigned kLRescale = 1u << 21;   // a thread's share of l above this halves O and l
constexpr float kLog2e = 1.4426950409f;
constexpr float kLn2 = 0.6931471806f;

template <Gran V_GRAN, Fmt OUT, int D, bool CAUSAL, int BM, int BN, int WARPS, int STAGES>
struct Kernel {
  static_assert(V_GRAN == Gran::per_tensor || V_GRAN == Gran::per_channel,
                "prefill_int8: V scale must be per_tensor or per_channel");
  static_assert(OUT == Fmt::fp16 || OUT == Fmt::bf16, "prefill_int8: output must be fp16 or bf16");
  static_assert(tiling_ok(D, BM, BN, WARPS, STAGES), "prefill_int8: invalid tiling (see prefill_int8_shape.h)");

  static constexpr int kThreads = WARPS * 32;
  static constexpr int kSmemBytes = smem_bytes(D, BM, BN, STAGES);

 private:
  static constexpr int kMT = BM / (16 * WARPS);   // m16 row tiles per warp
  static constexpr int kSN = BN / 8;              // n8 column blocks of S
  static constexpr int kON = D / 8;               // n8 column blocks of O
  static constexpr int kQKSteps = D / 32;         // k32 steps of Q·K^T
  static constexpr int kPVSteps = BN / 32;        // k32 steps of P·V
  static constexpr int kDChunks = D / 16;         // 16-byte chunks per Q / K row
  static constexpr int kNChunks = BN / 16;        // 16-byte chunks per V^T row
  static constexpr int kKTileBytes = BN * D;      // == V^T tile bytes
  static constexpr int kStageBytes = 2 * kKTileBytes + 4 * BN;

  // Per-CTA addressing, resolved once.
  struct Ctx {
    const signed char* k;   // K of (b, h_kv)
    const signed char* v;   // V^T of (b, h_kv)
    const float* k_scale;   // K scales of (b, h_kv)
    long long k_ss, v_sc;
    int k_group, kv_len, q_len, causal_offset;
    int row0;               // first query row of this warp
  };

  // Per-warp running state; fully unrolled indexing keeps all of it in registers.
  struct State {
    unsigned qf[kMT][kQKSteps][4];   // Q A-fragments, loaded once
    int o[kMT][kON][4];              // O in units of P̂ · V codes: the P·V mma accumulators
    unsigned l[kMT][2];              // this thread's share of Σ P̂, rows g and g + 8
#if QATTN_INT8_EXACT_L
    float l_exact[kMT][2];           // the same sum before rounding P̂
#endif
    float r[kMT][2];                 // reference max R of the base-2 logits
    float qs[kMT][2];                // q_scale · softmax_scale · log2(e)
  };

  // K rows are stored permuted: within every 32 keys, smem row 8j + n holds the key that S column n of
  // n8 block j must be, so that the S accumulator fragments of blocks (j0, j1) and (j2, j3) pack
  // directly into the m16n8k32 A fragment of P (4 consecutive keys per thread) while V^T keeps its
  // natural key order. Bits of the key offset w4..w0 map to smem row bits (w4, w1, w3, w2, w0).
  static __device__ __forceinline__ int k_smem_row(int r) {
    const int w = r & 31;
    return (r & ~31) | (w & 16) | ((w & 2) << 2) | ((w & 12) >> 1) | (w & 1);
  }

  // Thread-invariant parts of the tile loads, computed once: every tile only adds k0.
  struct Loader {
    const signed char* k;   // this thread's first K chunk of tile 0
    const signed char* v;   // this thread's first V^T chunk of tile 0
    long long k_pass, v_pass;   // bytes between this thread's consecutive K / V^T chunks
    unsigned k_smem, v_smem;
    int k_row;              // tile row of this thread's first K chunk
  };
  static constexpr int kKRowStep = kThreads / kDChunks;   // K rows covered by one pass of the CTA
  static constexpr int kVRowStep = kThreads / kNChunks;   // V^T rows covered by one pass
  static constexpr int kKPasses = (BN + kKRowStep - 1) / kKRowStep;
  static constexpr int kVPasses = (D + kVRowStep - 1) / kVRowStep;

  static __device__ __forceinline__ Loader make_loader(const Ctx& cx) {
    const int tid = threadIdx.x;
    Loader ld;
    const int kr = tid / kDChunks, kc = tid % kDChunks;
    // k_smem_row and the swizzle only permute the low 5 row bits, and kr < kKRowStep with kKRowStep
    // a multiple of 16: every pass just adds kKRowStep rows to the first one.
    const int ksr = k_smem_row(kr);
    ld.k = cx.k + kr * cx.k_ss + kc * 16;
    ld.k_pass = kKRowStep * cx.k_ss;
    ld.k_smem = ksr * D + int8::swizzle<kDChunks>(ksr, kc) * 16;
    ld.k_row = kr;
    const int vr = tid / kNChunks, vc = tid % kNChunks;
    ld.v = cx.v + vr * cx.v_sc + vc * 16;
    ld.v_pass = kVRowStep * cx.v_sc;
    ld.v_smem = kKTileBytes + vr * BN + int8::swizzle<kNChunks>(vr, vc) * 16;
    return ld;
  }

  static __device__ __forceinline__ void load_kv_tile(const Ctx& cx, const Loader& ld, unsigned stage, int k0) {
    const signed char* ksrc = ld.k + k0 * cx.k_ss;
#pragma unroll
    for (int it = 0; it < kKPasses; ++it) {
      const int r = ld.k_row + it * kKRowStep;
      if (BN % kKRowStep == 0 || r < BN) {
        const bool ok = k0 + r < cx.kv_len;   // K is not padded: zero-fill past kv_len
        int8::cp_async_16(stage + ld.k_smem + it * kKRowStep * D, ok ? ksrc : cx.k, ok);
      }
      ksrc += ld.k_pass;
    }
    const signed char* vsrc = ld.v + k0;
#pragma unroll
    for (int it = 0; it < kVPasses; ++it) {
      // V^T is zero-padded to kVPadTokens and bn divides it: always in bounds.
      if (D % kVRowStep == 0 || static_cast<int>(threadIdx.x) / kNChunks + it * kVRowStep < D)
        int8::cp_async_16(stage + ld.v_smem + it * kVRowStep * BN, vsrc, true);
      vsrc += ld.v_pass;
    }
    const int tid = threadIdx.x;
    if (tid < BN) {
      const int key = k0 + tid;
      const bool ok = key < cx.kv_len;
      const int idx = cx.k_group == 1 ? key : (cx.k_group > 0 ? key / cx.k_group : 0);
      int8::cp_async_4(stage + 2 * kKTileBytes + 4 * tid, cx.k_scale + (ok ? idx : 0), ok);
    }
  }

  // Raises R of the rows whose tile max exceeds it (to that max + kHeadroom) or whose l grew too
  // large, and rescales O and l by 2^(R_old - R_new). Rare, so it may use slow conversions.
  static __device__ __forceinline__ void raise_reference(State& st, const float (&m_tile)[kMT][2]) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        unsigned lq = st.l[mt][hf];
        lq = max(lq, __shfl_xor_sync(0xffffffffu, lq, 1));
        lq = max(lq, __shfl_xor_sync(0xffffffffu, lq, 2));
        const float r_old = st.r[mt][hf];
        float r_new = m_tile[mt][hf] > r_old ? m_tile[mt][hf] + kHeadroom : r_old;
        if (lq > kLRescale) r_new += 1.f;
        const float alpha = r_new == r_old ? 1.f : int8::ex2(r_old - r_new);   // R = -inf: 0
        st.r[mt][hf] = r_new;
#pragma unroll
        for (int n = 0; n < kON; ++n)
#pragma unroll
          for (int e = 2 * hf; e < 2 * hf + 2; ++e)
            st.o[mt][n][e] = int8::f2i_rn(int8::i2f(st.o[mt][n][e]) * alpha);
        st.l[mt][hf] = static_cast<unsigned>(int8::f2i_rn(int8::i2f(static_cast<int>(st.l[mt][hf])) * alpha));
#if QATTN_INT8_EXACT_L
        st.l_exact[mt][hf] *= alpha;
#endif
      }
  }

  template <bool MASKED>
  static __device__ __forceinline__ void attend_tile(State& st, const Ctx& cx, const char* smem,
                                                     unsigned stage, int stage_offset, int k0) {
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t4 = lane & 3;

    // S = Q̂·K̂^T, accumulators start at the magic bias so they read back as floats.
    int s[kMT][kSN][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int j = 0; j < kSN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][j][e] = int8::kMagicBits;
#pragma unroll
    for (int j = 0; j < kSN; ++j) {
#pragma unroll
      for (int h = 0; h < D / 64; ++h) {
        unsigned kb[4];
        const int row = 8 * j + (lane & 7), chunk = 4 * h + (lane >> 3);
        int8::ldmatrix_x4(kb, stage + row * D + int8::swizzle<kDChunks>(row, chunk) * 16);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          int8::mma_s8s8(s[mt][j], st.qf[mt][2 * h], kb[0], kb[1]);
          int8::mma_s8s8(s[mt][j], st.qf[mt][2 * h + 1], kb[2], kb[3]);
        }
      }
    }

    // u = S · k_scale. Thread columns of k-step ps are keys 32ps + 4t4 + 0..3 (blocks j0, j1) and
    // 32ps + 16 + 4t4 + 0..3 (blocks j2, j3): two float4 reads of the staged scales.
    const float* kscale = reinterpret_cast<const float*>(smem + stage_offset + 2 * kKTileBytes);
    float u[kMT][kSN][4];
#pragma unroll
    for (int ps = 0; ps < kPVSteps; ++ps) {
      const float4 lo = *reinterpret_cast<const float4*>(kscale + 32 * ps + 4 * t4);
      const float4 hi = *reinterpret_cast<const float4*>(kscale + 32 * ps + 16 + 4 * t4);
      const float ksc[4][2] = {{lo.x, lo.y}, {lo.z, lo.w}, {hi.x, hi.y}, {hi.z, hi.w}};
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const float kbias[2] = {-int8::kMagic * ksc[jj][0], -int8::kMagic * ksc[jj][1]};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float x = fmaf(__int_as_float(s[mt][4 * ps + jj][e]), ksc[jj][e & 1], kbias[e & 1]);
            if (MASKED) {
              const int key = k0 + 32 * ps + 16 * (jj >> 1) + 4 * t4 + 2 * (jj & 1) + (e & 1);
              const int row = cx.row0 + 16 * mt + g + 8 * (e >> 1);
              if (key >= cx.kv_len || (CAUSAL && key > row + cx.causal_offset)) x = int8::neg_inf();
            }
            u[mt][4 * ps + jj][e] = x;
          }
      }
    }

    // Tile max per row (a tree, then across the quad that shares the row); raise R where needed.
    float m_tile[kMT][2];
    bool raise = false;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float mx[kSN];
#pragma unroll
        for (int j = 0; j < kSN; ++j) mx[j] = fmaxf(u[mt][j][2 * hf], u[mt][j][2 * hf + 1]);
#pragma unroll
        for (int w = 1; w < kSN; w *= 2)
#pragma unroll
          for (int j = 0; j + w < kSN; j += 2 * w) mx[j] = fmaxf(mx[j], mx[j + w]);
        float m = fmaxf(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        m_tile[mt][hf] = m * st.qs[mt][hf];   // qs > 0: -inf stays -inf
        raise |= m_tile[mt][hf] > st.r[mt][hf] || st.l[mt][hf] > kLRescale;
      }
    if (__any_sync(0xffffffffu, raise)) raise_reference(st, m_tile);

    // P̂ = round(kPScale · 2^(L - R)), packed straight into the A fragments of P·V.
    unsigned pf[kMT][kPVSteps][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      float pbias[2], rbias[2];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {   // R = -inf only while every key so far is masked (u = -inf)
        rbias[hf] = st.r[mt][hf] == int8::neg_inf() ? 0.f : -st.r[mt][hf];
        pbias[hf] = kLog2PScale + rbias[hf];
      }
#pragma unroll
      for (int ps = 0; ps < kPVSteps; ++ps) {
#if QATTN_INT8_EX2_F16
        // Exponent L - R <= 0 in fp32, 2^x and the rounding in fp16 pairs: half the MUFU work.
        float x[4][4];
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
#pragma unroll
          for (int e = 0; e < 4; ++e) x[jj][e] = fmaf(u[mt][4 * ps + jj][e], st.qs[mt][e >> 1], rbias[e >> 1]);
        pf[mt][ps][0] = int8::pack_even_bytes(int8::exp2_to_bytes_f16x2(x[0][0], x[0][1]),
                                              int8::exp2_to_bytes_f16x2(x[1][0], x[1][1]));
        pf[mt][ps][1] = int8::pack_even_bytes(int8::exp2_to_bytes_f16x2(x[0][2], x[0][3]),
                                              int8::exp2_to_bytes_f16x2(x[1][2], x[1][3]));
        pf[mt][ps][2] = int8::pack_even_bytes(int8::exp2_to_bytes_f16x2(x[2][0], x[2][1]),
                                              int8::exp2_to_bytes_f16x2(x[3][0], x[3][1]));
        pf[mt][ps][3] = int8::pack_even_bytes(int8::exp2_to_bytes_f16x2(x[2][2], x[2][3]),
                                              int8::exp2_to_bytes_f16x2(x[3][2], x[3][3]));
#else
        float y[4][4];
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int hf = e >> 1;
            y[jj][e] = int8::ex2(fmaf(u[mt][4 * ps + jj][e], st.qs[mt][hf], pbias[hf]));
#if QATTN_INT8_EXACT_L
            st.l_exact[mt][hf] += y[jj][e];
#endif
          }
        // A fragment: reg0 = row g, keys 4t4..+3 = (j0 e0, j0 e1, j1 e0, j1 e1); reg1 = row g + 8;
        // reg2 / reg3 = the same for blocks j2, j3 (keys 16 + 4t4..+3).
        pf[mt][ps][0] = int8::pack_even_bytes(int8::round_to_bytes_f16x2(y[0][0], y[0][1]),
                                              int8::round_to_bytes_f16x2(y[1][0], y[1][1]));
        pf[mt][ps][1] = int8::pack_even_bytes(int8::round_to_bytes_f16x2(y[0][2], y[0][3]),
                                              int8::round_to_bytes_f16x2(y[1][2], y[1][3]));
        pf[mt][ps][2] = int8::pack_even_bytes(int8::round_to_bytes_f16x2(y[2][0], y[2][1]),
                                              int8::round_to_bytes_f16x2(y[3][0], y[3][1]));
        pf[mt][ps][3] = int8::pack_even_bytes(int8::round_to_bytes_f16x2(y[2][2], y[2][3]),
                                              int8::round_to_bytes_f16x2(y[3][2], y[3][3]));
#endif
        st.l[mt][0] = int8::byte_sum(pf[mt][ps][0], int8::byte_sum(pf[mt][ps][2], st.l[mt][0]));
        st.l[mt][1] = int8::byte_sum(pf[mt][ps][1], int8::byte_sum(pf[mt][ps][3], st.l[mt][1]));
      }
    }

    // O += P̂·V̂, accumulated by the mma itself.
    const unsigned vtile = stage + kKTileBytes;
#pragma unroll
    for (int c = 0; c < D / 16; ++c) {
#pragma unroll
      for (int ps = 0; ps < kPVSteps; ++ps) {
        unsigned vb[4];
        const int row = 16 * c + (lane & 7) + ((lane >> 4) << 3);
        const int chunk = 2 * ps + ((lane >> 3) & 1);
        int8::ldmatrix_x4(vb, vtile + row * BN + int8::swizzle<kNChunks>(row, chunk) * 16);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          int8::mma_u8s8(st.o[mt][2 * c], pf[mt][ps], vb[0], vb[1]);
          int8::mma_u8s8(st.o[mt][2 * c + 1], pf[mt][ps], vb[2], vb[3]);
        }
      }
    }
  }

  static __device__ __forceinline__ void store_output(const AttentionParams& p, const State& st,
                                                      const Ctx& cx, int b, int h, int h_kv) {
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const float* vs = p.v_scale.ptr + b * p.v_scale.sb + h_kv * p.v_scale.sh;
    const float* vmean = p.v_mean ? p.v_mean + (static_cast<long long>(b) * p.heads_kv + h_kv) * D : nullptr;
    unsigned short* out = static_cast<unsigned short*>(p.o.ptr) + b * p.o.sb + h * p.o.sh;
    const float vs_all = V_GRAN == Gran::per_tensor ? vs[0] : 1.f;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
#if QATTN_INT8_EXACT_L
        float l = st.l_exact[mt][hf];
#else
        float l = static_cast<float>(st.l[mt][hf]);
#endif
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int row = cx.row0 + 16 * mt + g + 8 * hf;
        if (row >= cx.q_len) continue;
        const bool seen = l > 0.f;
        const float inv = seen ? vs_all / l : 0.f;
        unsigned short* orow = out + row * p.o.ss;
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
          const unsigned packed = OUT == Fmt::fp16 ? int8::pack_f16x2(v0, v1) : int8::pack_bf16x2(v0, v1);
          *reinterpret_cast<unsigned*>(orow + col) = packed;
        }
        if (p.lse && t4 == 0) {
          p.lse[(static_cast<long long>(b) * p.heads_q + h) * cx.q_len + row] =
              seen ? (st.r[mt][hf] + int8::lg2(l / kPScale)) * kLn2 : int8::neg_inf();
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
      kv_end = int8::imin(kv_end, last_row + cx.causal_offset + 1);
      const int first_row_end = q0 + cx.causal_offset + 1;
      n_full = int8::imin(n_full, first_row_end > 0 ? first_row_end / BN : 0);
    }
    const int n_tiles = kv_end > 0 ? (kv_end + BN - 1) / BN : 0;

    State st;
    const signed char* qg = static_cast<const signed char*>(p.q.ptr) + b * p.q.sb + h * p.q.sh;
    const float* qscale = p.q_scale.ptr + b * p.q_scale.sb + h * p.q_scale.sh;
    const float qmul = p.softmax_scale * kLog2e;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int row = cx.row0 + 16 * mt + (lane >> 2) + 8 * hf;
        float qs = 1.f;
        if (row < p.q_len) qs = qscale[p.q_scale.group > 0 ? row / p.q_scale.group : 0] * qmul;
        // A zero row (scale 0) must give a uniform softmax, not 0 · inf = NaN on masked keys.
        st.qs[mt][hf] = fmaxf(qs, 1e-30f);
        st.r[mt][hf] = int8::neg_inf();
        st.l[mt][hf] = 0u;
#if QATTN_INT8_EXACT_L
        st.l_exact[mt][hf] = 0.f;
#endif
      }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int n = 0; n < kON; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) st.o[mt][n][e] = 0;

    if (n_tiles > 0) {
      const unsigned sbase = int8::smem_u32(smem);
      constexpr int kQChunks = BM * kDChunks;
#pragma unroll
      for (int it = 0; it < (kQChunks + kThreads - 1) / kThreads; ++it) {
        const int i = it * kThreads + tid;
        if (kQChunks % kThreads == 0 || i < kQChunks) {
          const int r = i / kDChunks, c = i % kDChunks;
          const bool ok = q0 + r < p.q_len;
          int8::cp_async_16(sbase + r * D + int8::swizzle<kDChunks>(r, c) * 16,
                            qg + (ok ? (q0 + r) * p.q.ss + c * 16 : 0), ok);
        }
      }
      const Loader ld = make_loader(cx);
      // The Q tile travels in the first group, together with KV tile 0.
#pragma unroll
      for (int s = 0; s < STAGES - 1; ++s) {
        if (s < n_tiles) load_kv_tile(cx, ld, sbase + BM * D + s * kStageBytes, s * BN);
        int8::cp_async_commit();
      }
      int8::cp_async_wait<STAGES - 2>();
      __syncthreads();
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int ks = 0; ks < kQKSteps; ++ks) {
          const int row = warp * 16 * kMT + 16 * mt + (lane & 15);
          const int chunk = 2 * ks + (lane >> 4);
          int8::ldmatrix_x4(st.qf[mt][ks], sbase + row * D + int8::swizzle<kDChunks>(row, chunk) * 16);
        }

      for (int t = 0; t < n_tiles; ++t) {
        int8::cp_async_wait<STAGES - 2>();
        __syncthreads();   // tile t landed for all threads; tile t - 1's buffer is free
        const int t_next = t + STAGES - 1;
        if (t_next < n_tiles) load_kv_tile(cx, ld, sbase + BM * D + (t_next % STAGES) * kStageBytes, t_next * BN);
        int8::cp_async_commit();
        const int stage_offset = BM * D + (t % STAGES) * kStageBytes;
        if (t < n_full)
          attend_tile<false>(st, cx, smem, sbase + stage_offset, stage_offset, t * BN);
        else
          attend_tile<true>(st, cx, smem, sbase + stage_offset, stage_offset, t * BN);
      }
      int8::cp_async_wait<0>();
    }
    store_output(p, st, cx, b, h, h_kv);
  }
};

}  // namespace prefill_int8
}  // namespace qattn

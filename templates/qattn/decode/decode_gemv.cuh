// Split-K decode attention on CUDA cores (the `gemv` dataflow): the same contract as the tensor-core
// kernel (decode_mma.cuh; DecodeParams in abi.h) without padding the rows to 16. A CTA owns BM query
// rows of one KV head (row = i * gqa + query head within the group) and one split of the cache; its
// warps take the split's chunks of BN tokens in turn, each with its own online softmax.
//
// Per warp (decode_gemv_shape.h): a token row is spread over kLanes lanes of kCh channels each, and the
// 32 / kLanes groups of lanes take one token each per step (group g takes chunk rows g * kSteps ...).
// A lane holds Q and O of all BM rows for its channels in fp32 registers.
//   S = Q K^T     each lane decodes its channels of the group's K row once (codes to fp32, in the
//                 row's own scale) and accumulates BM partial dot products; the BM partials are summed
//                 over the kLanes lanes with a transposing butterfly (each exchange halves the values a
//                 lane carries), so a lane ends up with the score of one row, its "own row".
//   softmax       online, in base 2, per block of up to 8 steps: the block's max over the groups by
//                 shuffles, one exponential per lane and token (its own row's).
//   O += P V      the P of every row is broadcast within the group, the lane decodes its channels of
//                 the V row once and accumulates BM x kCh products.
// Codes become fp32 with integer tricks (int8: a byte next to the exponent of 2^23; int4: a nibble in
// the mantissa of 128, kInt4Bias), never an I2F. Per-token scales are applied once per token instead
// of per element (K: S = scale (Q . codes) + shift sum(Q); V: P scale, and sum P shift added at the
// end); int4 per_group dequantizes element-wise; fp8 e4m3 codes decode to fp16 (2^-8 x their value)
// and both head scales fold into S and O.
// Chunks travel by cp.async in 16-byte units, STAGES per warp in flight (as in the mma kernel). At the
// end every group of every warp is one softmax state; they are merged through shared memory, and the
// output or the split's partial is written as the mma kernel's finish() does (natural channel order).
// softmax=unified_max: p = 2^(x2 - phi2), no max, row flags for the exact fallback (abi.h).
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"
#include "qattn/decode/chunk_loader.cuh"
#include "qattn/decode/decode_gemv_shape.h"
#include "qattn/decode/flashq_dequant.cuh"
#include "qattn/decode/kv_dequant.cuh"
#include "qattn/decode/sas.h"

namespace qattn::decode {

template <Fmt KV, Gran G, Fmt OUT, int D, bool CAUSAL, bool PAGED, SoftmaxMode SMX, int BM, int BN, int WARPS,
          int STAGES>
struct GemvKernel {
  static_assert(KV != Fmt::flashq || !CAUSAL, "decode gemv: flashq blocks are never masked (the new tokens are in the buffer)");
  static_assert(gemv_tiling_ok(KV, G, D, BM, BN, WARPS, STAGES),
                "decode gemv: unsupported format or tiling (decode_gemv_shape.h)");
  static_assert(OUT == Fmt::fp16 || OUT == Fmt::bf16, "decode: queries and outputs are fp16 or bf16");

  static constexpr int kThreads = WARPS * 32;
  static constexpr int kSmemBytes = gemv_smem_bytes(KV, G, D, BM, BN, WARPS, STAGES);

 private:
  using u16 = dev::u16;
  using u32 = dev::u32;

  static constexpr bool kUnifiedMax = SMX == SoftmaxMode::unified_max;
  static constexpr int kRow = kv::row_bytes(KV, G, D);
  static constexpr int kHdr = kv::header_bytes(KV, G);
  static constexpr int kGroupChannels = D / kv::groups(KV, G);
  static constexpr int kLanes = gemv_token_lanes(D, BM);   // lanes per token
  static constexpr int kCh = gemv_lane_channels(BM);       // channels per lane
  static constexpr int kGroups = 32 / kLanes;              // tokens per step
  static constexpr int kSteps = BN / kGroups;              // steps per chunk
  // Steps per softmax update: more steps give more independent loads and products in flight, fewer
  // steps fewer registers (fp16/bf16 at bm 8 spilled with 4 on sm_80).
  static constexpr int kBlockMax = BM == 8 && !quantized(KV) ? 2 : BM >= 4 ? 4 : 8;
  static constexpr int kBlock = kSteps < kBlockMax ? kSteps : kBlockMax;   // steps per softmax update
  static constexpr int kUnitBytes = gemv_unit_bytes(KV, G, D, BM);
  static constexpr int kUnitCh = kUnitBytes * 8 / gemv_element_bits(KV);
  static constexpr int kUnits = kCh / kUnitCh;             // units per lane
  static constexpr int kWords = kUnitBytes / 4;
  static constexpr int kRowBits = BM == 1 ? 0 : BM == 2 ? 1 : BM == 4 ? 2 : 3;
  // flashq: a chunk is one 64-token block (BN == 64) of the widest bit width; see fq_* below.
  static constexpr bool kFq = KV == Fmt::flashq;
  static constexpr int kChunkBytes = kFq ? kv::flashq_block_bytes(4, D) : BN * kRow;
  using Loader = ChunkLoader<kRow, BN, PAGED, false>;   // chunk copies (chunk_loader.cuh), rows in place
  static constexpr int kWarpPipeBytes = STAGES * 2 * kChunkBytes;
  static constexpr int kStates = WARPS * kGroups;          // softmax states merged at the end
  static_assert(kLanes >= BM && kLanes <= 32 && kCh % kUnitCh == 0 && kUnits >= 1 && kSteps % kBlock == 0,
                "decode gemv: inconsistent lane split (decode_gemv_shape.h)");
  static_assert(kChunkBytes % 16 == 0, "chunks are copied in 16-byte units");
  static_assert(kStates * BM * (D + 2) * 4 <= kSmemBytes, "decode gemv: merge area larger than shared memory");

  // int4 codes q decode to the float kInt4Bias + q, exact (decode_unit); the bias goes with the shift:
  // scale (bias + q) + (shift - bias scale) = scale q + shift. It is small enough that the fp32 sums
  // over biased codes lose next to nothing (2^-24 x 128 relative to |Q| or P).
  static constexpr float kInt4Bias = 128.f;
  // int8: S = scale_t (Q . codes_t); int4 per token: S = scale_t (Q . codes_t) + shift_t sum(Q).
  static constexpr bool kFoldShift = KV == Fmt::int4 && G == Gran::per_token;
  static constexpr bool kFoldScale = KV == Fmt::int8 || kFoldShift;

  struct State {
    float o[BM][kCh];   // O of every row for the lane's channels, over its group's tokens
    float m;            // own row: running max (log2 units; -inf until a visible token); unified_max:
                        // the largest score, for the flags only
    float l;            // own row: sum of P over the group's tokens
    float v_shift;      // own row: sum of P shift_t over the group's tokens (int4 per-token V)
  };

  // ---- lane split

  // The row whose sum reduce_rows leaves in lane-in-group j, and a lane holding a given row's sum.
  static __device__ __forceinline__ constexpr int own_row(int j) {
    int r = 0;
#pragma unroll
    for (int bit = 0; bit < kRowBits; ++bit)
      if ((j >> bit) & 1) r += BM >> (bit + 1);
    return r;
  }
  static __device__ __forceinline__ constexpr int lane_of_row(int m) {
    int j = 0;
#pragma unroll
    for (int bit = 0; bit < kRowBits; ++bit)
      if (m & (BM >> (bit + 1))) j |= 1 << bit;
    return j;
  }

  // Sums v[m] over the kLanes lanes of a group and returns the sum of row own_row(j) (v is consumed).
  // Each butterfly exchange sends half of the rows still carried and keeps the other half, so BM - 1
  // shuffles (plus log2(kLanes / BM) for the remaining lanes) instead of BM log2(kLanes).
  static __device__ __forceinline__ float reduce_rows(float (&v)[BM], int j) {
#pragma unroll
    for (int bit = 0; bit < kRowBits; ++bit) {
      const int half = BM >> (bit + 1);   // rows carried after this exchange
      const bool upper = (j >> bit) & 1;
#pragma unroll
      for (int i = 0; i < half; ++i) {
        const float send = upper ? v[i] : v[i + half];
        const float keep = upper ? v[i + half] : v[i];
        v[i] = keep + dev::shfl_xor(send, 1 << bit);
      }
    }
#pragma unroll
    for (int mask = BM; mask < kLanes; mask *= 2) v[0] += dev::shfl_xor(v[0], mask);
    return v[0];
  }

  // A plain load from the pipeline's shared memory (see decode_mma.cuh).
  template <class T>
  static __device__ __forceinline__ T load(const char* p) {
    return *reinterpret_cast<const T*>(p);
  }

  // V rows at or past len (inside a straddling group) become zero bytes, which every format decodes
  // to 0 with a zero scale: their P is 0, and 0 * (garbage or NaN) must not reach O.
  static __device__ __forceinline__ void zero_tail_rows(char* v_tile, int t0, int len, int lane) {
    const int first = len - t0;
    if (first >= BN) return;
    u32* words = reinterpret_cast<u32*>(v_tile + first * kRow);
    for (int i = lane; i < (BN - first) * kRow / 4; i += 32) words[i] = 0u;
  }

  // ---- decoding

  // Channels [unit * kUnitCh, (unit + 1) * kUnitCh) of a row (starting at `row`) as fp32: fp16/bf16
  // and fp8 (2^-8 x the e4m3 value) as stored, int8 as its codes and int4 per token as kInt4Bias + its
  // codes (the per-token scale and shift, and the bias, applied by the caller), int4 per_group
  // dequantized with its group's (scale, shift).
  static __device__ __forceinline__ void decode_unit(const char* row, int unit, float (&x)[kUnitCh]) {
    const char* src = row + kHdr + unit * kUnitBytes;
    u32 w[kWords];
    if constexpr (kWords == 4) {
      const dev::U32x4 v = load<dev::U32x4>(src);
      w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    } else if constexpr (kWords == 2) {
      const dev::U32x2 v = load<dev::U32x2>(src);
      w[0] = v.x, w[1] = v.y;
    } else {
      w[0] = load<u32>(src);
    }
#pragma unroll
    for (int i = 0; i < kWords; ++i) {
      if constexpr (KV == Fmt::fp16) {
        dev::unpack_half2(w[i], x[2 * i], x[2 * i + 1]);
      } else if constexpr (KV == Fmt::bf16) {
        dev::unpack_bf162(w[i], x[2 * i], x[2 * i + 1]);
      } else if constexpr (KV == Fmt::int8) {
        // Byte k next to the exponent byte of 2^23: the float 2^23 + (c ^ 0x80) = 2^23 + 128 + c, exact.
        const u32 u = w[i] ^ 0x80808080u;
#pragma unroll
        for (int k = 0; k < 4; ++k) x[4 * i + k] = __uint_as_float(dev::prmt(u, 0x4B000000u, 0x7650u | k)) - 8388736.f;
      } else if constexpr (KV == Fmt::int4) {
        // The even and the odd channels' nibbles as bytes; byte b into the mantissa of the float 128
        // (bits 16..19): the float 128 + q, exact, one permute per channel (the bias folds out later).
        const u32 even = w[i] & 0x0F0F0F0Fu, odd = (w[i] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          x[8 * i + 2 * b] = __uint_as_float(dev::prmt(even, 0x43000000u, 0x7054u | (b << 8)));
          x[8 * i + 2 * b + 1] = __uint_as_float(dev::prmt(odd, 0x43000000u, 0x7054u | (b << 8)));
        }
      } else {   // fp8e4m3
        u32 lo, hi;
        dev::e4m3x4_to_half2(w[i], lo, hi);
        dev::unpack_half2(lo, x[4 * i], x[4 * i + 1]);
        dev::unpack_half2(hi, x[4 * i + 2], x[4 * i + 3]);
      }
    }
    if constexpr (KV == Fmt::int4 && G == Gran::per_group) {
      float scale, shift;
      dev::unpack_half2(load<u32>(row + 4 * (unit * kUnitCh / kGroupChannels)), scale, shift);
      const float biased_shift = fmaf(-kInt4Bias, scale, shift);
#pragma unroll
      for (int e = 0; e < kUnitCh; ++e) x[e] = fmaf(x[e], scale, biased_shift);
    }
  }

  // Score (log2 units) of the group's token at chunk row r for the lane's own row.
  static __device__ __forceinline__ float score(const char* k_tile, int r, const float (&q)[BM][kCh], float q_sum,
                                                float scale_log2, int j) {
    const char* row = k_tile + r * kRow;
    float dot[BM];
#pragma unroll
    for (int m = 0; m < BM; ++m) dot[m] = 0.f;
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
      float x[kUnitCh];
      decode_unit(row, j + k * kLanes, x);
#pragma unroll
      for (int e = 0; e < kUnitCh; ++e)
#pragma unroll
        for (int m = 0; m < BM; ++m) dot[m] = fmaf(q[m][k * kUnitCh + e], x[e], dot[m]);
    }
    float s = reduce_rows(dot, j);
    if constexpr (KV == Fmt::int8) s *= load<float>(row);
    if constexpr (kFoldShift) {   // the dot product is over kInt4Bias + codes
      float scale, shift;
      dev::unpack_half2(load<u32>(row), scale, shift);
      s = fmaf(scale, s, fmaf(-kInt4Bias, scale, shift) * q_sum);
    }
    return s * scale_log2;
  }

  // O += P V for the group's token at chunk row r; p is the lane's own row's P.
  static __device__ __forceinline__ void pv_step(const char* v_tile, int r, float p, State& st, int lane, int j) {
    const char* row = v_tile + r * kRow;
    float pv = p;
    if constexpr (KV == Fmt::int8) pv *= load<float>(row);
    if constexpr (kFoldShift) {
      float scale, shift;
      dev::unpack_half2(load<u32>(row), scale, shift);
      st.v_shift = fmaf(p, fmaf(-kInt4Bias, scale, shift), st.v_shift);   // O sums P scale (bias + codes)
      pv *= scale;
    }
    float pm[BM];
#pragma unroll
    for (int m = 0; m < BM; ++m)
      pm[m] = BM == 1 ? pv : __shfl_sync(0xffffffffu, pv, (lane & ~(kLanes - 1)) | lane_of_row(m));
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
      float x[kUnitCh];
      decode_unit(row, j + k * kLanes, x);
#pragma unroll
      for (int e = 0; e < kUnitCh; ++e)
#pragma unroll
        for (int m = 0; m < BM; ++m) st.o[m][k * kUnitCh + e] = fmaf(pm[m], x[e], st.o[m][k * kUnitCh + e]);
    }
  }

  // e^x of a score difference given in log2 units: ex2, or SAS for softmax=sas (sas.h).
  static __device__ __forceinline__ float exp_of_log2(float x2) {
    if constexpr (SMX == SoftmaxMode::sas) return sas::exp(x2 * dev::kLn2);
    else return dev::exp2_approx(x2);
  }

  // Scores s (own row, one per step of the block) -> P; updates the running max, the sums and O.
  static __device__ __forceinline__ void softmax_block(float (&s)[kBlock], State& st, float phi2, int lane) {
    float mx = s[0];
#pragma unroll
    for (int i = 1; i < kBlock; ++i) mx = fmaxf(mx, s[i]);
    if constexpr (kUnifiedMax) {
      // FlashDecoding++: one constant phi2, no rescale, no shuffle; the largest score feeds the flags.
      st.m = fmaxf(st.m, mx);
#pragma unroll
      for (int i = 0; i < kBlock; ++i) {
        s[i] = dev::exp2_approx(s[i] - phi2);
        st.l += s[i];
      }
      return;
    }
#pragma unroll
    for (int mask = kLanes; mask < 32; mask *= 2) mx = fmaxf(mx, dev::shfl_xor(mx, mask));
    const float m_new = fmaxf(st.m, mx);
    // Past the first blocks the running max rarely rises: the O rescale is skipped unless some row's did.
    if (__any_sync(0xffffffffu, m_new != st.m)) {
      const float alpha = m_new == st.m ? 1.f : exp_of_log2(st.m - (m_new == dev::neg_inf() ? 0.f : m_new));
      st.l *= alpha;
      st.v_shift *= alpha;
#pragma unroll
      for (int m = 0; m < BM; ++m) {
        const float a = BM == 1 ? alpha : __shfl_sync(0xffffffffu, alpha, lane_of_row(m));
#pragma unroll
        for (int c = 0; c < kCh; ++c) st.o[m][c] *= a;
      }
      st.m = m_new;
    }
    // A row with only masked tokens so far keeps max -inf; subtracting 0 keeps NaN out.
    const float m_use = st.m == dev::neg_inf() ? 0.f : st.m;
    if constexpr (SMX == SoftmaxMode::sas) {
#pragma unroll
      for (int i = 0; i + 1 < kBlock; i += 2) sas::exp2x((s[i] - m_use) * dev::kLn2, (s[i + 1] - m_use) * dev::kLn2, s[i], s[i + 1]);
      if constexpr (kBlock % 2 == 1) s[kBlock - 1] = exp_of_log2(s[kBlock - 1] - m_use);
    } else {
#pragma unroll
      for (int i = 0; i < kBlock; ++i) s[i] = dev::exp2_approx(s[i] - m_use);
    }
#pragma unroll
    for (int i = 0; i < kBlock; ++i) st.l += s[i];
  }

  // Q of the CTA's rows for the lane's channels (rows past `rows` are zero), and for the int4
  // per-token K the sum of the own row's Q.
  static __device__ __forceinline__ void load_q(const DecodeParams& p, float (&q)[BM][kCh], float& q_sum, int b,
                                                int h, int row0, int rows, int j) {
    const int gqa = p.heads_q / p.heads_kv;
    float sums[BM];
#pragma unroll
    for (int m = 0; m < BM; ++m) {
      const int row = row0 + m;
      const bool valid = row < rows;
      const u16* src = static_cast<const u16*>(p.q.ptr) + (long long)b * p.q.sb +
                       (long long)(h * gqa + (valid ? row % gqa : 0)) * p.q.sh +
                       (long long)(valid ? row / gqa : 0) * p.q.ss;
      float sum = 0.f;
#pragma unroll
      for (int k = 0; k < kUnits; ++k)
#pragma unroll
        for (int e = 0; e < kUnitCh; ++e) {
          const float x = valid ? dev::to_float<OUT>(src[(j + k * kLanes) * kUnitCh + e]) : 0.f;
          q[m][k * kUnitCh + e] = x;
          sum += x;
        }
      sums[m] = sum;
    }
    q_sum = 0.f;
    if constexpr (kFoldShift) q_sum = reduce_rows(sums, j);
  }

  // Merges the groups' states (every group of every warp) and writes the output (one split) or the
  // split's partial (slot split_base + split); unified_max: ORs the row flags, one atomic per row and
  // CTA; fallback_only: writes only the rows whose flags are not exactly kUmSeen.
  // The CTA's coordinates are recomputed here rather than kept live across the main loop.
  static __device__ void finish(const DecodeParams& p, State& st, char* smem) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int split = blockIdx.x, b = blockIdx.z;
    const int gqa = p.heads_q / p.heads_kv, rows = gqa * p.q_len;
    const int row_blocks = (rows + BM - 1) / BM;
    const int h = blockIdx.y / row_blocks, row0 = (blockIdx.y % row_blocks) * BM;
    float* mo = reinterpret_cast<float*>(smem);   // [kStates][BM][D]
    float* mm = mo + kStates * BM * D;            // [kStates][BM]
    float* ml = mm + kStates * BM;                // [kStates][BM]
    const int j = lane % kLanes, state = warp * kGroups + lane / kLanes;
    if constexpr (kFoldShift) {
#pragma unroll
      for (int m = 0; m < BM; ++m) {
        const float shift = __shfl_sync(0xffffffffu, st.v_shift, (lane & ~(kLanes - 1)) | lane_of_row(m));
#pragma unroll
        for (int c = 0; c < kCh; ++c) st.o[m][c] += shift;
      }
    }
    float out_scale = 1.f;
    if constexpr (KV == Fmt::fp8e4m3) out_scale = p.v_head_scale[h] * dev::kE4m3HalfFactor;
#pragma unroll
    for (int m = 0; m < BM; ++m)
#pragma unroll
      for (int k = 0; k < kUnits; ++k)
#pragma unroll
        for (int e = 0; e < kUnitCh; ++e)
          mo[(state * BM + m) * D + (j + k * kLanes) * kUnitCh + e] = st.o[m][k * kUnitCh + e] * out_scale;
    if (j < BM) {
      mm[state * BM + own_row(j)] = st.m;
      ml[state * BM + own_row(j)] = st.l;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < BM * D; idx += kThreads) {
      const int row = idx / D, col = idx % D;
      if (row0 + row >= rows) continue;
      const int hq = h * gqa + (row0 + row) % gqa, i = (row0 + row) / gqa;
      const long long out_row = ((long long)b * p.heads_q + hq) * p.q_len + i;
      if constexpr (!kUnifiedMax)
        if (p.fallback_only && p.row_flags[out_row] == kUmSeen) continue;   // the unified-max result stands
      float m = dev::neg_inf();
      for (int s = 0; s < kStates; ++s) m = fmaxf(m, mm[s * BM + row]);
      if constexpr (kUnifiedMax) {
        // x - phi >= hi for the largest score <=> for some score; -inf (nothing visible): no flag.
        if (col == 0) {
          const float top = m - p.um_phi2;
          const int flags = (top >= p.um_hi2 ? kUmOverflow : 0) | (top > p.um_lo2 ? kUmSeen : 0);
          if (flags != 0) atomicOr(p.row_flags + out_row, flags);
        }
        m = p.um_phi2;
      }
      float acc = 0.f, sum = 0.f;
      if (m != dev::neg_inf())
        for (int s = 0; s < kStates; ++s) {
          const float f = kUnifiedMax ? 1.f : dev::exp2_approx(mm[s * BM + row] - m);
          acc += f * mo[(s * BM + row) * D + col];
          sum += f * ml[s * BM + row];
        }
      const float value = sum > 0.f ? acc / sum : 0.f;
      const float lse2 = sum > 0.f ? m + dev::log2_approx(sum) : dev::neg_inf();
      if (p.splits == 1) {
        u16* o = static_cast<u16*>(p.o.ptr) + (long long)b * p.o.sb + (long long)hq * p.o.sh + (long long)i * p.o.ss;
        o[col] = dev::from_float<OUT>(value);
        if (col == 0 && p.lse != nullptr) p.lse[out_row] = lse2 * dev::kLn2;
      } else {
        const int slot = p.split_base + split;
        p.part_o[(out_row * p.splits + slot) * D + col] = value;
        if (col == 0) p.part_lse[out_row * p.splits + slot] = lse2;
      }
    }
  }

 // ---- FlashQ (KV == flashq; kv_layout.h): a chunk is one block of K and one of V with the head's
  // bit widths KB / VB; its per-channel (s_c, m_c) become a float table in shared memory once per block
  // (the lane reads its channels' entries), and each code decodes to the INT8 value s_c * code + m_c
  // (exact in fp32); alpha scales the score (K) and P (V). The lane's channels are those of load_q:
  // units of kUnitCh = 8 channels (gemv_unit_bytes for flashq), i.e. KB bytes of codes per unit.
  static_assert(!kFq || (kUnitCh == 8 && BN == kv::kFlashQBlock), "decode gemv: flashq units are 8 channels, chunks one block");

  // The block's (s_c, m_c) as floats: table[2c], table[2c + 1].
  static __device__ __forceinline__ void fq_table(const char* block, float* table, int lane) {
    const unsigned char* s = reinterpret_cast<const unsigned char*>(block) + kv::kFlashQHeaderBytes;
    const signed char* m = reinterpret_cast<const signed char*>(s + D);
    for (int c = lane; c < D; c += 32) {
      table[2 * c] = float(s[c]);
      table[2 * c + 1] = float(m[c]);
    }
  }

  // Channels [unit * 8, unit * 8 + 8) of code row r of a BITS-bit block, as INT8 values.
  template <int BITS>
  static __device__ __forceinline__ void fq_decode_unit(const char* block, int r, int unit, const float* table,
                                                        float (&x)[kUnitCh]) {
    const char* codes = block + kv::flashq_codes_offset(D) + r * kv::flashq_code_row_bytes(BITS, D) + unit * BITS;
    const u32 w = BITS == 4 ? load<u32>(codes) : u32(load<u16>(codes));
    const float4* t = reinterpret_cast<const float4*>(table + 16 * unit);
#pragma unroll
    for (int e2 = 0; e2 < 4; ++e2) {   // channels 2 e2, 2 e2 + 1
      const float4 sm = t[e2];         // (s, m) of both
      const int c0 = int((w >> (BITS * 2 * e2)) & ((1u << BITS) - 1u));
      const int c1 = int((w >> (BITS * (2 * e2 + 1))) & ((1u << BITS) - 1u));
      x[2 * e2] = fmaf(float(c0), sm.x, sm.y);
      x[2 * e2 + 1] = fmaf(float(c1), sm.z, sm.w);
    }
  }

  // Score (log2 units, times scale = scale_log2 * alpha_k) of the group's token at block row r.
  template <int KB>
  static __device__ __forceinline__ float fq_score(const char* k_block, int r, const float (&q)[BM][kCh], float scale,
                                                   const float* table, int j) {
    float dot[BM];
#pragma unroll
    for (int m = 0; m < BM; ++m) dot[m] = 0.f;
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
      float x[kUnitCh];
      fq_decode_unit<KB>(k_block, r, j + k * kLanes, table, x);
#pragma unroll
      for (int e = 0; e < kUnitCh; ++e)
#pragma unroll
        for (int m = 0; m < BM; ++m) dot[m] = fmaf(q[m][k * kUnitCh + e], x[e], dot[m]);
    }
    return reduce_rows(dot, j) * scale;
  }

  // O += P V for the group's token at block row r (p: the own row's P times alpha_v).
  template <int VB>
  static __device__ __forceinline__ void fq_pv_step(const char* v_block, int r, float p, State& st, const float* table,
                                                    int lane, int j) {
    float pm[BM];
#pragma unroll
    for (int m = 0; m < BM; ++m)
      pm[m] = BM == 1 ? p : __shfl_sync(0xffffffffu, p, (lane & ~(kLanes - 1)) | lane_of_row(m));
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
      float x[kUnitCh];
      fq_decode_unit<VB>(v_block, r, j + k * kLanes, table, x);
#pragma unroll
      for (int e = 0; e < kUnitCh; ++e)
#pragma unroll
        for (int m = 0; m < BM; ++m) st.o[m][k * kUnitCh + e] = fmaf(pm[m], x[e], st.o[m][k * kUnitCh + e]);
    }
  }


  template <int KB, int VB>
  static __device__ void run_impl(const DecodeParams& p, char* smem) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int j = lane % kLanes, g = lane / kLanes;
    const int split = blockIdx.x, b = blockIdx.z;
    const int gqa = p.heads_q / p.heads_kv;
    const int rows = gqa * p.q_len;
    const int row_blocks = (rows + BM - 1) / BM;
    const int h = blockIdx.y / row_blocks, row0 = (blockIdx.y % row_blocks) * BM;
    const int len = p.kv_lens[b];
    const int start = split * p.split_tokens;
    if (start >= len) return;   // the combine kernel reads only the splits that hold tokens
    if constexpr (!kUnifiedMax)
      if (p.fallback_only) {   // the exact pass after a unified-max one: only CTAs with a flagged row work
        const int r = row0 + int(threadIdx.x);
        bool flagged = false;
        if (threadIdx.x < BM && r < rows)
          flagged = p.row_flags[((long long)b * p.heads_q + h * gqa + r % gqa) * p.q_len + r / gqa] != kUmSeen;
        if (!__syncthreads_or(flagged)) return;
      }
    const int end = min(len, start + p.split_tokens);
    const int n_chunks = (end - start + BN - 1) / BN;
    const int my_chunks = warp < n_chunks ? (n_chunks - warp + WARPS - 1) / WARPS : 0;
    // Tokens every row of this CTA may see, and those the lane's own row may see.
    const int seen_by_all = CAUSAL ? min(len, len - p.q_len + 1 + row0 / gqa) : len;
    const int own = own_row(j);
    const int limit = CAUSAL ? min(len, len - p.q_len + 1 + (row0 + own) / gqa) : len;

    const u32 pipe = dev::smem_addr(smem) + warp * kWarpPipeBytes;
    char* pipe_ptr = smem + warp * kWarpPipeBytes;   // the same memory, for plain loads and stores
    auto chunk_t0 = [&](int i) { return start + (warp + i * WARPS) * BN; };
    // flashq: the head's block offsets in a page, and the warp's (s, m) tables after the pipelines.
    const int off_k = kFq ? p.fq_heads[2 * h + 1] : 0, off_v = kFq ? p.fq_heads[2 * (p.heads_kv + h) + 1] : 0;
    float* table_k = reinterpret_cast<float*>(smem + WARPS * kWarpPipeBytes) + warp * 4 * D;
    float* table_v = table_k + 2 * D;
    auto load = [&](int i, u32 dst) {
      if constexpr (kFq) dev::flashq_load_block<D, PAGED, KB, VB>(p, dst, dst + kChunkBytes, b, chunk_t0(i) / BN, off_k, off_v, lane);
      else Loader::load_chunk(p, dst, dst + kChunkBytes, b, h, chunk_t0(i), len, lane);
    };
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) {
      if (i < my_chunks) load(i, pipe + i * 2 * kChunkBytes);
      dev::cp_async_commit();
    }

    float q[BM][kCh];
    float q_sum;
    load_q(p, q, q_sum, b, h, row0, rows, j);
    float scale_log2 = p.softmax_scale * dev::kLog2e;
    if constexpr (KV == Fmt::fp8e4m3) scale_log2 *= p.k_head_scale[h] * dev::kE4m3HalfFactor;

    State st;
#pragma unroll
    for (int m = 0; m < BM; ++m)
#pragma unroll
      for (int c = 0; c < kCh; ++c) st.o[m][c] = 0.f;
    st.m = dev::neg_inf();
    st.l = 0.f;
    st.v_shift = 0.f;

    for (int i = 0; i < my_chunks; ++i) {
      {
        const int next = i + STAGES - 1;
        const u32 dst = pipe + (next % STAGES) * 2 * kChunkBytes;
        if (next < my_chunks) load(next, dst);
        dev::cp_async_commit();
      }
      dev::cp_async_wait<STAGES - 1>();
      __syncwarp();
      const int t0 = chunk_t0(i);
      const char* k_tile = pipe_ptr + (i % STAGES) * 2 * kChunkBytes;
      char* v_tile = pipe_ptr + (i % STAGES) * 2 * kChunkBytes + kChunkBytes;
      if (t0 + BN > len) {
        zero_tail_rows(v_tile, t0, len, lane);
        __syncwarp();   // zeroed rows visible to the whole warp
      }
      const bool masked = t0 + BN > seen_by_all;
      float fq_scale = 0.f, alpha_v = 0.f;
      if constexpr (kFq) {
        fq_table(k_tile, table_k, lane);
        fq_table(v_tile, table_v, lane);
        __syncwarp();
        fq_scale = scale_log2 * dev::flashq_alpha(k_tile);
        alpha_v = dev::flashq_alpha(v_tile);
      }
#pragma unroll 1
      for (int blk = 0; blk < kSteps; blk += kBlock) {
        float s[kBlock];
#pragma unroll
        for (int ii = 0; ii < kBlock; ++ii) {
          const int r = g * kSteps + blk + ii;
          if constexpr (kFq) s[ii] = fq_score<KB>(k_tile, r, q, fq_scale, table_k, j);
          else s[ii] = score(k_tile, r, q, q_sum, scale_log2, j);
          // A select, so garbage or NaN in unused rows of a straddling group never survives.
          if (masked && t0 + r >= limit) s[ii] = dev::neg_inf();
        }
        softmax_block(s, st, p.um_phi2, lane);
#pragma unroll
        for (int ii = 0; ii < kBlock; ++ii) {
          if constexpr (kFq) fq_pv_step<VB>(v_tile, g * kSteps + blk + ii, s[ii] * alpha_v, st, table_v, lane, j);
          else pv_step(v_tile, g * kSteps + blk + ii, s[ii], st, lane, j);
        }
      }
      __syncwarp();   // every lane is done with this stage before it is refilled
    }
    dev::cp_async_wait_all();
    __syncthreads();   // the pipeline memory becomes the merge area
    finish(p, st, smem);
  }

 public:
  static __device__ void run(const DecodeParams& p, char* smem) {
    if constexpr (kFq) {
      // The head's bit widths pick one of four specialisations (uniform over the CTA).
      const int h = blockIdx.y / ((p.heads_q / p.heads_kv * p.q_len + BM - 1) / BM);
      const int kb = p.fq_heads[2 * h], vb = p.fq_heads[2 * (p.heads_kv + h)];
      if (kb == 4 && vb == 4) run_impl<4, 4>(p, smem);
      else if (kb == 4) run_impl<4, 2>(p, smem);
      else if (vb == 4) run_impl<2, 4>(p, smem);
      else run_impl<2, 2>(p, smem);
    } else {
      run_impl<0, 0>(p, smem);
    }
  }
};

}  // namespace qattn::decode

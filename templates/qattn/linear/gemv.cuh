// Linear layer on CUDA cores for a few tokens (the `gemv` dataflow, FlashDecoding++'s ImplA).
//
// A CTA owns BM tokens and BN output channels; warp w takes its BN / WARPS channels kRows rows at a
// time (linear_shape.h, gemv_rows) and streams those W rows over the CTA's split of K: lane l reads
// 16-byte vectors l, l + 32, ... of each row (a warp reads 512 consecutive bytes of a row per step),
// STAGES vectors per row in flight per lane, straight into registers (no shared memory: each W byte is
// read once, and kRows x STAGES x 16 bytes per lane in flight cover the latency). The A elements that
// match a vector (8 per 16-bit chunk, 1 .. 4 chunks per vector) are read through L1, where all the
// CTA's warps find them, converted to fp32 once per chunk and token, and used for all kRows rows.
// Products and sums are fp32: each lane keeps kRows x BM partial dot products, summed over the warp at
// the end of a row group by a transposing butterfly (each exchange halves the values a lane carries),
// after which lane j < kRows x BM holds the full sum of value own_value(j).
// Weights decode to fp32 (weight_tile.cuh): int8 as its codes (the per-channel scale is applied in the
// epilogue), int4 as 128 + q. A vector's 32 int4 codes lie in one group of 128 k, so its scale and shift
// apply once per vector and token rather than once per code: the vector adds
// scale * sum(a (128 + q)) + shift * sum(a) to the row's sum (shift = -(128 + zero) scale).
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"
#include "qattn/linear/linear_shape.h"
#include "qattn/linear/split_k_epilogue.cuh"
#include "qattn/linear/weight_tile.cuh"

namespace qattn::linear {

// 16 bytes that are read once (W): no L1 allocation, so A stays cached.
__device__ __forceinline__ dev::U32x4 ld_stream_16(const void* p) {
  dev::U32x4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
// 16 bytes that every warp of the CTA reads (A): through L1.
__device__ __forceinline__ dev::U32x4 ld_cached_16(const void* p) {
  dev::U32x4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <Fmt A, Fmt W, Fmt OUT, int N, int K, bool BIAS, int BM, int BN, int WARPS, int STAGES>
struct Gemv {
  static_assert(linear_tiling_problem(Dataflow::gemv, A, W, BM, BN, WARPS, STAGES, false) == nullptr,
                "linear gemv: unsupported formats or tiling (linear_shape.h)");
  static_assert(K % gemv_vector_codes(W) == 0 && (W != Fmt::int4 || K % kLinearInt4Group == 0),
                "linear gemv: K must be a multiple of 8 (16-bit W), 16 (int8) or 128 (int4)");

  static constexpr int kThreads = WARPS * 32;

 private:
  using u32 = dev::u32;
  using U32x4 = dev::U32x4;
  using Epi = Epilogue<W, OUT, BIAS>;

  static constexpr bool kInt4 = W == Fmt::int4;
  static constexpr int kRows = gemv_rows(BM, W);            // W rows streamed together
  static constexpr int kCodes = gemv_vector_codes(W);     // k per 16-byte W vector
  static constexpr int kChunks = kCodes / 8;              // 8-element A chunks per vector
  static constexpr int kWarpRows = BN / WARPS;
  static constexpr int kValues = kRows * BM;              // partial sums per lane
  static constexpr int kValueBits = kValues == 2 ? 1 : kValues == 4 ? 2 : kValues == 8 ? 3 : kValues == 16 ? 4 : 5;
  static_assert((1 << kValueBits) == kValues && kValues <= 32, "linear gemv: kRows x BM must be a power of 2");

  // The value (r * BM + t) whose sum reduce() leaves in lane j (j < kValues; bit b of j picks the
  // upper half of what is carried at exchange b).
  static __device__ __forceinline__ int own_value(int j) {
    int i = 0;
#pragma unroll
    for (int b = 0; b < kValueBits; ++b)
      if ((j >> b) & 1) i += kValues >> (b + 1);
    return i;
  }

  // c ? x : y as a register select (a plain ?: on array elements may become a select of their
  // addresses, which sends the array to local memory).
  static __device__ __forceinline__ float select(bool c, float x, float y) {
    float r;
    asm("{\n.reg .pred p;\nsetp.ne.u32 p, %3, 0;\nselp.f32 %0, %1, %2, p;\n}" : "=f"(r) : "f"(x), "f"(y), "r"(int(c)));
    return r;
  }

  // One exchange of the transposing butterfly: lanes with bit B set keep the upper HALF values and send
  // the lower ones, the others the reverse; then the next exchange on the HALF values kept.
  template <int B, int HALF>
  static __device__ __forceinline__ void exchange(float (&v)[kValues], int lane) {
    const bool upper = (lane >> B) & 1;
#pragma unroll
    for (int i = 0; i < HALF; ++i) {
      const float send = select(upper, v[i], v[i + HALF]);
      const float keep = select(upper, v[i + HALF], v[i]);
      v[i] = keep + dev::shfl_xor(send, 1 << B);
    }
    if constexpr (HALF > 1) exchange<B + 1, HALF / 2>(v, lane);
  }

  // Sums v over the warp (v is consumed); returns the sum of value own_value(lane % kValues).
  static __device__ __forceinline__ float reduce(float (&v)[kValues], int lane) {
    if constexpr (kValues > 1) exchange<0, kValues / 2>(v, lane);
#pragma unroll
    for (int mask = kValues; mask < 32; mask *= 2) v[0] += dev::shfl_xor(v[0], mask);
    return v[0];
  }

  // Weights of chunk j (k = 8j .. 8j + 7 of the vector) as fp32 (int4: 128 + q, see above).
  static __device__ __forceinline__ void decode(const U32x4& wv, int j, float (&x)[8]) {
    const u32 w[4] = {wv.x, wv.y, wv.z, wv.w};
    if constexpr (W == Fmt::int8) {
      float lo[4], hi[4];
      int8x4_to_float(w[2 * j], lo);
      int8x4_to_float(w[2 * j + 1], hi);
#pragma unroll
      for (int e = 0; e < 4; ++e) x[e] = lo[e], x[4 + e] = hi[e];
    } else if constexpr (W == Fmt::int4) {
      int4x8_to_biased_float(w[j], x);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) dev::unpack2<W>(w[e], x[2 * e], x[2 * e + 1]);
    }
  }

 public:
  static __device__ void run(const LinearParams& p, char* /*smem: unused*/) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
    int k0, k_end;
    split_range<K>(p, k0, k_end);
    const int vectors = k_end > k0 ? (k_end - k0) / kCodes : 0;   // k0 and k_end are multiples of kCodes
    const int tokens = min(BM, p.m - m0);
    const long long ldw_bytes = W == Fmt::int4 || W == Fmt::int8 ? p.ldw : p.ldw * 2;
    const char* a_split = static_cast<const char*>(p.a) + ((long long)m0 * p.lda + k0) * 2;

#pragma unroll 1
    for (int r0 = warp * kWarpRows; r0 < (warp + 1) * kWarpRows; r0 += kRows) {
      // Row r of the group at w_rows + r * ldw_bytes (one 64-bit base; rows past N are never read).
      const char* w_rows = static_cast<const char*>(p.w) + (n0 + r0) * ldw_bytes + (long long)k0 * weight_bits(W) / 8;
      const int rows_ok = N - (n0 + r0);   // rows r < rows_ok exist
      float acc[kRows][BM];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int t = 0; t < BM; ++t) acc[r][t] = 0.f;

#pragma unroll 1
      for (int v0 = lane; v0 < vectors; v0 += 32 * STAGES) {
        U32x4 wv[STAGES][kRows];
        float scale[STAGES][kRows], shift[STAGES][kRows];
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
          const int v = v0 + 32 * s;
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            const bool ok = v < vectors && r < rows_ok;
            wv[s][r] = ok ? ld_stream_16(w_rows + r * ldw_bytes + v * 16) : U32x4{0u, 0u, 0u, 0u};
            scale[s][r] = shift[s][r] = 0.f;
            if constexpr (W == Fmt::int4) {
              if (ok) {
                const long long i = (long long)(n0 + r0 + r) * (K / kLinearInt4Group) + (k0 + v * kCodes) / kLinearInt4Group;
                scale[s][r] = ld_nc(p.w_scale + i);
                shift[s][r] = int4_shift(scale[s][r], ld_nc(p.w_zero + i));
              }
            }
          }
        }
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
          const int v = v0 + 32 * s;
          if (v >= vectors) continue;
          // int4: the vector's sums of a (128 + q) per row and of a per token, scaled after the vector.
          float part[kInt4 ? kRows : 1][BM], a_sum[BM];
#pragma unroll
          for (int t = 0; t < BM; ++t) {
            a_sum[t] = 0.f;
#pragma unroll
            for (int r = 0; r < (kInt4 ? kRows : 1); ++r) part[r][t] = 0.f;
          }
#pragma unroll
          for (int j = 0; j < kChunks; ++j) {
            // The chunk's activations (all tokens) first, then one row's weights at a time: at bm 1 and 2,
            // where rows outnumber tokens, fewer registers stay live than when every row is decoded first.
            float af[BM][8];
#pragma unroll
            for (int t = 0; t < BM; ++t) {
              const U32x4 av =
                  t < tokens ? ld_cached_16(a_split + (t * p.lda + v * kCodes + 8 * j) * 2) : U32x4{0u, 0u, 0u, 0u};
              const u32 aw[4] = {av.x, av.y, av.z, av.w};
#pragma unroll
              for (int e = 0; e < 4; ++e) dev::unpack2<A>(aw[e], af[t][2 * e], af[t][2 * e + 1]);
              if constexpr (kInt4)
                a_sum[t] += ((af[t][0] + af[t][1]) + (af[t][2] + af[t][3])) +
                            ((af[t][4] + af[t][5]) + (af[t][6] + af[t][7]));
            }
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
              float wf[8];
              decode(wv[s][r], j, wf);
#pragma unroll
              for (int t = 0; t < BM; ++t) {
                float& sum = kInt4 ? part[kInt4 ? r : 0][t] : acc[r][t];
#pragma unroll
                for (int e = 0; e < 8; ++e) sum = fmaf(af[t][e], wf[e], sum);
              }
            }
          }
          if constexpr (kInt4) {
#pragma unroll
            for (int r = 0; r < kRows; ++r)
#pragma unroll
              for (int t = 0; t < BM; ++t)
                acc[r][t] = fmaf(scale[s][r], part[r][t], fmaf(shift[s][r], a_sum[t], acc[r][t]));
          }
        }
      }

      float vals[kValues];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int t = 0; t < BM; ++t) vals[r * BM + t] = acc[r][t];
      const float sum = reduce(vals, lane);
      if (lane < kValues) {
        const int i = own_value(lane);
        Epi::put(p, m0 + i % BM, n0 + r0 + i / BM, sum);
      }
    }
    Epi::template reduce_splits<BM, BN, kThreads>(p, m0, n0);
  }
};

}  // namespace qattn::linear

// Weight decoding for the linear kernels: int8 / int4 codes to fp32 (gemv) or to pairs of A's 16-bit
// type (the mma operands), and the cp.async copies of swizzled W / A / int4-scale tiles.
//
// Codes become floats with byte permutes next to a fixed exponent, never an I2F:
//   int8  the byte c ^ 0x80 = c + 128 below the exponent byte of 2^23 reads as 2^23 + 128 + c, and one
//         subtraction leaves c (exact); for fp16 pairs, next to the exponent byte 0x64 it reads as the
//         fp16 1024 + 128 + c, and one f16x2 subtraction of 1152 leaves c (exact: |c| < 2^11).
//   int4  the nibble q in bits 16..19 of the float 128 reads as 128 + q; the zero point and this bias fold
//         into one shift per group: (q - z) s = (128 + q) s + shift with shift = -(128 + z) s. The
//         product is rounded once to A's type (and |shift| only rounds at 2^-24 of (128 + 15) s).
// int8 weights stay unscaled codes in the products (exact in fp16 and bf16); the per-channel scale is
// applied to the fp32 sums in the epilogue (split_k_epilogue.cuh).
//
// Mma fragments of quantized W (flat_gemm.cuh, gemm.cuh). ldmatrix moves 16-bit pairs, so on a tile of
// codes lane 4g + t receives bytes 4t .. 4t + 3 of row g of each 8 x 16-byte tile: four int8 codes
// k = 4t .. 4t + 3 of a 16-code chunk, or eight int4 codes k = 8t .. 8t + 7 of a 32-code chunk. The
// m16n8k16 fragment wants logical k pairs (2t, 2t + 1) and (2t + 8, 2t + 9); any bijection of the 16 k
// of one product is fine as long as both operands use it, so the kernels take
//   logical (2t, 2t + 1)     <- codes (4t, 4t + 1)            of a 16-code step
//   logical (2t + 8, 2t + 9) <- codes (4t + 2, 4t + 3)
// and the activation operand of the same step is the 4 consecutive elements 4t .. 4t + 3 of its row
// (one 8-byte shared load) instead of an ldmatrix. An int4 word holds two such steps: step s is bytes
// 2s (codes 8t + 4s, + 1) and 2s + 1 (codes 8t + 4s + 2, + 3) of the word.
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"
#include "qattn/common/int8_ptx.cuh"

namespace qattn::linear {

using dev::u32;
using int8::prmt;

// ---- to fp32 (gemv)

// Four int8 codes (byte 0 first) as exact fp32.
__device__ __forceinline__ void int8x4_to_float(u32 w, float (&x)[4]) {
  const u32 u = w ^ 0x80808080u;
#pragma unroll
  for (int j = 0; j < 4; ++j) x[j] = __uint_as_float(prmt(u, 0x4B000000u, 0x7650u | j)) - 8388736.f;
}

// Eight int4 codes in k order (byte j: low nibble k = 2j, high nibble k = 2j + 1) as 128 + q.
__device__ __forceinline__ void int4x8_to_biased_float(u32 w, float (&x)[8]) {
  const u32 even = w & 0x0F0F0F0Fu, odd = (w >> 4) & 0x0F0F0F0Fu;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    x[2 * j] = __uint_as_float(prmt(even, 0x43000000u, 0x7054u | (j << 8)));
    x[2 * j + 1] = __uint_as_float(prmt(odd, 0x43000000u, 0x7054u | (j << 8)));
  }
}

// (scale, zero) of a group as the (scale, shift) of int4x4_to_pairs / the gemv fold.
__device__ __forceinline__ float int4_shift(float scale, float zero) { return -(128.f + zero) * scale; }

// ---- to pairs of A's type (mma operands)

// Four int8 codes as two pairs: lo = (c0, c1), hi = (c2, c3). Exact.
template <Fmt A>
__device__ __forceinline__ void int8x4_to_pairs(u32 w, u32& lo, u32& hi) {
  const u32 u = w ^ 0x80808080u;
  if constexpr (A == Fmt::fp16) {
    // Byte permutes build the halves 0x64uu (1024 + u); subtracting 1152 (0x6480) leaves c.
    const u32 l = prmt(u, 0x64646464u, 0x5140u), h = prmt(u, 0x64646464u, 0x5342u);
    lo = dev::hsub2(l, 0x64806480u);
    hi = dev::hsub2(h, 0x64806480u);
  } else {
    float x[4];
    int8x4_to_float(w, x);
    lo = dev::pack2<A>(x[0], x[1]);
    hi = dev::pack2<A>(x[2], x[3]);
  }
}

// The int4 codes of bytes B and B + 1 of w, dequantized, as two pairs: lo = (B low, B high nibble),
// hi = (B + 1 low, B + 1 high). shift = -(128 + zero) * scale (see above).
template <Fmt A, int B>
__device__ __forceinline__ void int4x4_to_pairs(u32 w, float scale, float shift, u32& lo, u32& hi) {
  static_assert(B == 0 || B == 2, "int4x4_to_pairs: byte pair 0-1 or 2-3");
  const u32 even = w & 0x0F0F0F0Fu, odd = (w >> 4) & 0x0F0F0F0Fu;
  float x[4];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    x[2 * j] = __uint_as_float(prmt(even, 0x43000000u, 0x7054u | ((B + j) << 8)));
    x[2 * j + 1] = __uint_as_float(prmt(odd, 0x43000000u, 0x7054u | ((B + j) << 8)));
  }
  lo = dev::pack2<A>(fmaf(x[0], scale, shift), fmaf(x[1], scale, shift));
  hi = dev::pack2<A>(fmaf(x[2], scale, shift), fmaf(x[3], scale, shift));
}

// ---- int4 in the flat GEMM's k order (flat_gemm.cuh)
//
// The flat GEMM takes its own k order inside a word, one that needs no byte permute on the weights: a
// mask and a fixed exponent (one LOP3) turn the low nibbles of bytes j and j + 2 into the pair
// (M + q_j, M + q_{j+2}) of A's type (M = 1024 for fp16). So step s of a word's two k16 steps takes
//   logical (2t, 2t + 1)     <- codes (8t + 2s,     8t + 2s + 4)      the low nibbles of bytes s, s + 2
//   logical (2t + 8, 2t + 9) <- codes (8t + 2s + 1, 8t + 2s + 5)      their high nibbles
// and activation_step_pairs builds the activations in that order.
// fp16 stays in packed 16-bit arithmetic: the high nibble is read in place (M + 16q, exact below 2048),
// one fma makes q exact and a second gives q s - z s, with s, z s and the weight each rounded to fp16
// (unit roundoff 2^-11: two roundings more than the fp32 fold above, far below the int4 step s).
// bf16 decodes through fp32 as int4x4_to_pairs does (one rounding of the weight): its 8-bit significand
// would make the two extra roundings of the packed form a visible share of the error.

// A group's constants for int4x8_to_step_pairs: fp16 (s, s) and (-z s, -z s) pairs; bf16 the fp32 bits
// of s and of the fold's shift -(128 + z) s.
template <Fmt A>
__device__ __forceinline__ void int4_group_constants(float scale, float zero, u32& c0, u32& c1) {
  if constexpr (A == Fmt::fp16) {
    c0 = dev::pack2<A>(scale, scale);
    const float nzs = -zero * scale;
    c1 = dev::pack2<A>(nzs, nzs);
  } else {
    c0 = __float_as_uint(scale);
    c1 = __float_as_uint(int4_shift(scale, zero));
  }
}

// The eight codes of w (byte j: k = 2j low nibble, 2j + 1 high), dequantized, as the pairs of the word's
// two k16 steps: lo[s] for logical k (2t, 2t + 1), hi[s] for (2t + 8, 2t + 9) (order above); c0, c1 from
// int4_group_constants.
template <Fmt A>
__device__ __forceinline__ void int4x8_to_step_pairs(u32 w, u32 c0, u32 c1, u32 (&lo)[2], u32 (&hi)[2]) {
  if constexpr (A == Fmt::fp16) {
    constexpr u32 kMagic = 0x64006400u, kOne = 0x3C003C00u;          // (1024, 1024), (1, 1)
    constexpr u32 kMinusM = 0xE400E400u, kMinusM16 = 0xD400D400u;    // (-1024, -1024), (-64, -64)
    constexpr u32 kSixteenth = 0x2C002C00u;                          // (1/16, 1/16)
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const u32 ws = w >> (8 * s);
      const u32 q_lo = dev::hfma2((ws & 0x000F000Fu) | kMagic, kOne, kMinusM);
      const u32 q_hi = dev::hfma2((ws & 0x00F000F0u) | kMagic, kSixteenth, kMinusM16);
      lo[s] = dev::hfma2(q_lo, c0, c1);
      hi[s] = dev::hfma2(q_hi, c0, c1);
    }
  } else {
    const float scale = __uint_as_float(c0), shift = __uint_as_float(c1);
    const u32 even = w & 0x0F0F0F0Fu, odd = (w >> 4) & 0x0F0F0F0Fu;
    // 128 + the nibble of byte j (bits 16..19 of the float 128), scaled and shifted in fp32.
    const auto at = [&](u32 nibbles, int j) {
      return fmaf(__uint_as_float(prmt(nibbles, 0x43000000u, 0x7054u | (j << 8))), scale, shift);
    };
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      lo[s] = dev::pack2<A>(at(even, s), at(even, s + 2));
      hi[s] = dev::pack2<A>(at(odd, s), at(odd, s + 2));
    }
  }
}

// The activations of one lane's 8 k (a 16-byte load, v.x = (k 0, 1) .. v.w = (k 6, 7)) in the order of
// int4x8_to_step_pairs: b[s][0] = (k 2s, 2s + 4), b[s][1] = (k 2s + 1, 2s + 5).
__device__ __forceinline__ void activation_step_pairs(const dev::U32x4& v, u32 (&b)[2][2]) {
  b[0][0] = prmt(v.x, v.z, 0x5410u);
  b[0][1] = prmt(v.x, v.z, 0x7632u);
  b[1][0] = prmt(v.y, v.w, 0x5410u);
  b[1][1] = prmt(v.y, v.w, 0x7632u);
}

// ---- tile copies

// Copies a ROWS x CHUNKS tile of 16-byte chunks, row r starting at src + r * ld_bytes, into the
// swizzled shared tile at dst (dev::swizzled_offset). Chunks of rows >= rows or at or past `chunks`
// are zero-filled (nothing is read; `safe` is the in-bounds address passed instead).
template <int ROWS, int CHUNKS, int THREADS>
__device__ __forceinline__ void load_tile(u32 dst, const char* src, long long ld_bytes, int rows, int chunks,
                                          const void* safe, int tid) {
  constexpr int kTotal = ROWS * CHUNKS;
  constexpr int kIters = (kTotal + THREADS - 1) / THREADS;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = tid + it * THREADS;
    if (kTotal % THREADS == 0 || i < kTotal) {
      const int r = i / CHUNKS, c = i % CHUNKS;
      const bool ok = r < rows && c < chunks;
      dev::cp_async_16(dst + dev::swizzled_offset<CHUNKS>(r, c), ok ? src + r * ld_bytes + c * 16 : safe, ok);
    }
  }
}

// int4: the (scale, zero) pairs of rows n0 .. n0 + ROWS - 1 and groups g0 .. g0 + GROUPS - 1 into a
// shared float2 table [row][group]; pairs of rows past n_end or groups at or past g_end are zero
// (decoding to exact zeros: their activations are zero-filled too).
template <int ROWS, int GROUPS, int THREADS, int K>
__device__ __forceinline__ void load_scales(u32 dst, const LinearParams& p, int n0, int n_end, int g0, int g_end,
                                            int tid) {
  constexpr int kGroupsK = K / kLinearInt4Group;
  constexpr int kTotal = ROWS * GROUPS * 2;
  constexpr int kIters = (kTotal + THREADS - 1) / THREADS;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = tid + it * THREADS;
    if (kTotal % THREADS == 0 || i < kTotal) {
      const int e = i & 1, rg = i >> 1, r = rg / GROUPS, g = rg % GROUPS;
      const bool ok = n0 + r < n_end && g0 + g < g_end;
      const float* table = e ? p.w_zero : p.w_scale;
      const float* src = ok ? table + (long long)(n0 + r) * kGroupsK + g0 + g : table;
      dev::cp_async_ca<4>(dst + u32(i) * 4u, src, ok);
    }
  }
}

}  // namespace qattn::linear

// Register-level decoding of KV-cache rows (layout: qattn/decode/kv_layout.h) into fp16 pairs, the
// operands of the decode kernel's fp16 tensor-core products.
//
// int8: a code byte c becomes the fp16 1024 + (c ^ 0x80) by a byte permute next to the exponent byte
// 0x64, and subtracting 1152 leaves c exactly (|c| <= 127 fits fp16's 11-bit significand).
// int4: (word >> 4k) & 0x000F000F puts nibbles k and k + 4 of a 32-bit word into the low bits of two
// fp16 1024 + q, so one AND/OR pair decodes two codes; the pairs come out as (c0, c4), (c1, c5),
// (c2, c6), (c3, c7). The kernel feeds that order as is and maps the channels where it matters
// (the Q fragments and the output columns).
#pragma once
#include "qattn/common/convert.cuh"
#include "qattn/common/int8_ptx.cuh"
#include "qattn/common/types.cuh"

namespace qattn::dev {

using ::qattn::int8::prmt;

constexpr u32 kHalf2_1024 = 0x64006400u;   // (1024, 1024)
constexpr u32 kHalf2_1152 = 0x64806480u;   // (1152, 1152)

// Four int8 codes (bytes 0..3 of w) as two fp16 pairs (c0, c1), (c2, c3), exact.
__device__ __forceinline__ void int8x4_to_half2(u32 w, u32& lo, u32& hi) {
  const u32 u = w ^ 0x80808080u;
  lo = hsub2(prmt(u, kHalf2_1024, 0x5150u), kHalf2_1152);
  hi = hsub2(prmt(u, kHalf2_1024, 0x5352u), kHalf2_1152);
}

// Codes k and k + 4 of an int4 word as the fp16 pair (q_k, q_{k+4}), exact (k = 0..3).
__device__ __forceinline__ u32 int4_pair(u32 w, int k) {
  return hsub2(((w >> (4 * k)) & 0x000F000Fu) | kHalf2_1024, kHalf2_1024);
}

// The same pair as fp16 subnormals, for products whose scale is applied afterwards: a nibble left in
// place with a zero exponent field is the subnormal nibble * 2^-24, so k even gives 2^-24 (q_k,
// q_{k+4}) with one AND, and k odd 2^-20 (q_k, q_{k+4}) (the nibble four bits up) with one AND too;
// k >= 2 shifts once. The tensor cores take subnormal fp16 operands and form exact products, so the
// sums equal those of int4_pair times 2^-24 (or 2^-20) without its subtraction.
constexpr float kInt4Subnormal = 16777216.f;   // 2^24: a subnormal pair of an even k times this is the codes
__device__ __forceinline__ u32 int4_pair_subnormal(u32 w, int k) {
  return (w >> (8 * (k / 2))) & ((k & 1) ? 0x00F000F0u : 0x000F000Fu);
}

// e4m3 bytes 1 and 3 of t (bytes 0 and 2 are ignored) as the fp16 pair (lo from byte 1, hi from byte
// 3), each 2^-8 times the e4m3 value, exact: sign bits stay, exponent and mantissa move down by one bit
// into fp16's fields (the exponent biases differ by 8, which the 2^-8 absorbs; e4m3 subnormals land on
// fp16 subnormals with the same factor).
__device__ __forceinline__ u32 e4m3_bytes13_to_half2(u32 t) {
  return (t & 0x80008000u) | ((t >> 1) & 0x3F803F80u);
}
// Four e4m3 codes (bytes 0..3 of w) as the pairs (c0, c1), (c2, c3), each 2^-8 times the value.
__device__ __forceinline__ void e4m3x4_to_half2(u32 w, u32& lo, u32& hi) {
  lo = e4m3_bytes13_to_half2(prmt(w, w, 0x1000u));
  hi = e4m3_bytes13_to_half2(prmt(w, w, 0x3222u));
}
constexpr float kE4m3HalfFactor = 256.f;   // value = kE4m3HalfFactor * the decoded fp16

// (scale, shift) stored as one fp16 pair (scale in the low half) -> both halves scale / both shift.
__device__ __forceinline__ u32 dup_low_half(u32 pair) { return prmt(pair, pair, 0x1010u); }
__device__ __forceinline__ u32 dup_high_half(u32 pair) { return prmt(pair, pair, 0x3232u); }

}  // namespace qattn::dev

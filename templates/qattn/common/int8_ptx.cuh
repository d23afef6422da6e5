// Int8-specific device helpers of the INT8 attention kernels: bit tricks that turn int32 mma
// accumulators into floats and softmax probabilities into packed bytes without conversion
// instructions, byte sums, and the XOR swizzle of short (32- or 64-byte) int8 tile rows.
// Generic helpers (mma, ldmatrix, cp.async, exp2) come from qattn/common/common.cuh.
// Device-only and include-free (compiled by NVRTC with no include directory); sm_80+.
#pragma once

#include "qattn/common/types.cuh"

namespace qattn {
namespace int8 {

using dev::u32;

// Float bits of 1.5 * 2^23. Starting an int32 accumulator at these bits and adding |x| < 2^22 to it
// leaves the float bits of exactly (12582912 + x): the accumulator is read as a float and the bias
// is folded into the next fma, so no int-to-float conversion is ever issued.
constexpr int kMagicBits = 0x4B400000;
constexpr float kMagic = 12582912.0f;

__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
  u32 d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// round(y) for a pair of fp16 y in [0, 255]: 1024 + y has a spacing of exactly 1 in fp16, so after
// the add the integer sits in the low byte of each half (bits 0x6400 + round(y)). (y reaches fp16
// through cvt.rn first: rounded to 1/8 at worst, which moves the final integer by at most 1/16.)
__device__ __forceinline__ u32 round_f16x2(u32 h) {
  u32 d;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(h), "r"(0x64006400u));
  return d;
}

__device__ __forceinline__ u32 hadd2(u32 a, u32 b) {
  u32 d;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Byte 0 and byte 2 of two round_f16x2 results, as one word of four bytes (a's first).
__device__ __forceinline__ u32 pack_even_bytes(u32 a, u32 b) { return prmt(a, b, 0x6420u); }

// Sum of the four unsigned bytes of x, added to acc.
__device__ __forceinline__ u32 byte_sum(u32 x, u32 acc) {
  u32 d;
  asm("dp4a.u32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(0x01010101u), "r"(acc));
  return d;
}

__device__ __forceinline__ float i2f(int x) {
  float y;
  asm("cvt.rn.f32.s32 %0, %1;" : "=f"(y) : "r"(x));
  return y;
}

// x / 2^k rounded down, for 0 <= k: one shift (shr clamps shifts past 31, so a large k gives 0 or -1).
// Rescales an int32 accumulator by a power of two; rounding down instead of to nearest costs at most
// one unit of the accumulator per rescale, far below a code of P̂ times a code of V.
__device__ __forceinline__ int shift_floor(int x, int k) {
  int d;
  asm("shr.s32 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(k));
  return d;
}
__device__ __forceinline__ u32 shift_floor(u32 x, int k) {
  u32 d;
  asm("shr.u32 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(k));
  return d;
}

// XOR swizzle of 16-byte chunks for tiles whose rows hold CHUNKS chunks (2, 4 or 8): any 8 consecutive
// rows, read at one logical chunk, land on 8 distinct 16-byte bank groups (conflict-free ldmatrix).
// (dev::swizzled_offset covers rows of 8+ chunks only; int8 tiles also have 32- and 64-byte rows.)
template <int CHUNKS>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  static_assert(CHUNKS == 2 || CHUNKS == 4 || CHUNKS == 8, "swizzle: rows of 32, 64 or 128 bytes");
  return chunk ^ ((row / (8 / CHUNKS)) & (CHUNKS - 1));
}

}  // namespace int8
}  // namespace qattn

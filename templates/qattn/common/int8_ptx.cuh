// Inline-PTX primitives of the INT8 attention kernels: int8 tensor-core mma, ldmatrix, cp.async and the
// few bit tricks that turn int32 accumulators into floats (and floats into bytes) without conversion
// instructions. Device-only and include-free (compiled by NVRTC with no include directory); sm_80+.
//
// Everything lives in qattn::int8 so it can never collide with the fp16/bf16 helpers of qattn/common/.
#pragma once

namespace qattn {
namespace int8 {

// Float bits of 1.5 * 2^23. Starting an int32 accumulator at these bits and adding |x| < 2^22 to it
// leaves the float bits of exactly (12582912 + x): the accumulator is read as a float and the bias
// is folded into the next fma, so no int-to-float conversion is ever issued.
constexpr int kMagicBits = 0x4B400000;
constexpr float kMagic = 12582912.0f;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// D += A (16x32 s8, row) * B (32x8 s8, col): the Q·K^T step.
__device__ __forceinline__ void mma_s8s8(int (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D += A (16x32 u8, row) * B (32x8 s8, col): the P·V step, P being non-negative.
__device__ __forceinline__ void mma_u8s8(int (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 b16 matrices (8 rows x 16 bytes each); lane l gives the row address of matrix l/8, row l%8.
// For int8 data this is exactly the m16n8k32 A/B fragment layout when rows are k-contiguous.
// volatile: the same address holds a new tile after each barrier, so the load must never be merged.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16-byte global->shared copy that bypasses L1; when !valid it writes zeros and reads nothing.
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async_4(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// 2^x, one MUFU op; ex2(-inf) = 0.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float lg2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b, unsigned sel) {
  unsigned d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// round(y) for y in [0, 255], two at a time: fp16 1024 + y has a spacing of exactly 1, so after the
// add the integer sits in the low byte of each half (bits 0x6400 + round(y)).
__device__ __forceinline__ unsigned round_to_bytes_f16x2(float lo, float hi) {
  unsigned h, d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(h) : "f"(hi), "f"(lo));
  asm("add.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(h), "r"(0x64006400u));
  return d;
}

// round(254.5 · 2^x) for x <= 0, two at a time, in fp16: 2^x in [0, 1] keeps 11 significant bits,
// and 1024 + 254.5 · 2^x lands on the integer grid of fp16 as in round_to_bytes_f16x2.
__device__ __forceinline__ unsigned exp2_to_bytes_f16x2(float lo, float hi) {
  unsigned h, e, d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(h) : "f"(hi), "f"(lo));
  asm("ex2.approx.f16x2 %0, %1;\n" : "=r"(e) : "r"(h));
  asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(e), "r"(0x5BF45BF4u), "r"(0x64006400u));
  return d;
}

// Packs byte 0 and byte 2 of two words (two round_to_bytes_f16x2 results) into one word.
__device__ __forceinline__ unsigned pack_even_bytes(unsigned a, unsigned b) { return prmt(a, b, 0x6420u); }

__device__ __forceinline__ float i2f(int x) {
  float y;
  asm("cvt.rn.f32.s32 %0, %1;\n" : "=f"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ int f2i_rn(float x) {
  int y;
  asm("cvt.rni.s32.f32 %0, %1;\n" : "=r"(y) : "f"(x));
  return y;
}

// Sum of the four unsigned bytes of x, added to acc.
__device__ __forceinline__ unsigned byte_sum(unsigned x, unsigned acc) {
  unsigned d;
  asm("dp4a.u32.u32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(x), "r"(0x01010101u), "r"(acc));
  return d;
}

// Two floats to packed fp16 / bf16 (lo in the low half), round to nearest.
__device__ __forceinline__ unsigned pack_f16x2(float lo, float hi) {
  unsigned d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
  unsigned d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

// XOR swizzle of 16-byte chunks for tiles whose rows hold CHUNKS chunks (2, 4 or 8): any 8 consecutive
// rows, read at one logical chunk, land on 8 distinct 16-byte bank groups (conflict-free ldmatrix).
template <int CHUNKS>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  static_assert(CHUNKS == 2 || CHUNKS == 4 || CHUNKS == 8, "swizzle: rows of 32, 64 or 128 bytes");
  return chunk ^ ((row / (8 / CHUNKS)) & (CHUNKS - 1));
}

}  // namespace int8
}  // namespace qattn

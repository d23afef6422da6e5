// Warp-level tensor-core products (mma.sync), the m16n8kK shapes every sm_80+ target has.
//
// Fragment layouts (PTX ISA "Matrix fragments for mma.m16n8k*"), with lane = 4*g + t (g = lane/4,
// t = lane%4). For 16-bit inputs (k = 16), each register holds two consecutive-k elements:
//   A (16x16, row-major): a[0] = A[g][2t..2t+1]     a[1] = A[g+8][2t..2t+1]
//                         a[2] = A[g][2t+8..2t+9]   a[3] = A[g+8][2t+8..2t+9]
//   B (16x8, "col"):      b[0] = B[2t..2t+1][g]     b[1] = B[2t+8..2t+9][g]
//   C/D (16x8, fp32):     c[0..1] = C[g][2t..2t+1]  c[2..3] = C[g+8][2t..2t+1]
// For 8-bit inputs (k = 32) each register holds four consecutive-k elements (a[0] = A[g][4t..4t+3],
// a[1] = A[g+8][4t..], a[2] = A[g][4t+16..], a[3] = A[g+8][4t+16..]; b[0] = B[4t..4t+3][g],
// b[1] = B[4t+16..4t+19][g]); for 4-bit inputs (k = 64) eight (a[0] = A[g][8t..8t+7], ...).
// The C layout of one m16n8 product equals the A layout of half an m16k16 operand, which is why an
// fp32 score tile converted to 16 bits feeds the next product straight from registers.
#pragma once
#include "qattn/abi.h"
#include "qattn/common/types.cuh"

namespace qattn::dev {

// d += a * b, fp16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_m16n8k16_f16_f32(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += a * b, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_m16n8k16_bf16_f32(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Format-generic 16-bit product with fp32 accumulation (F = fp16 or bf16).
template <Fmt F>
__device__ __forceinline__ void mma_m16n8k16_f32(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  static_assert(F == Fmt::fp16 || F == Fmt::bf16, "mma_m16n8k16_f32: only fp16 and bf16");
  if constexpr (F == Fmt::fp16) mma_m16n8k16_f16_f32(d, a, b);
  else mma_m16n8k16_bf16_f32(d, a, b);
}

// d += a * b, fp16 inputs, fp16 accumulators (two packed halves per register: d[0] = row g,
// d[1] = row g+8). Twice the rate of fp32 accumulation on consumer parts, same on H100.
__device__ __forceinline__ void mma_m16n8k16_f16_f16(u32 (&d)[2], const u32 (&a)[4], const u32 (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};"
      : "+r"(d[0]), "+r"(d[1])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += a * b, signed int8 inputs, int32 accumulators (exact).
__device__ __forceinline__ void mma_m16n8k32_s8_s32(int (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += a * b, unsigned int8 A (e.g. probabilities in [0, 255]) times signed int8 B.
__device__ __forceinline__ void mma_m16n8k32_u8s8_s32(int (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += a * b, signed int4 inputs (eight per register), int32 accumulators. Emulated (slow) on sm_90.
__device__ __forceinline__ void mma_m16n8k64_s4_s32(int (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// FP8 (e4m3) products exist from sm_89 on. Callers must only instantiate this on such targets;
// elsewhere it traps so that a wrong dispatch fails loudly instead of returning garbage.
__device__ __forceinline__ void mma_m16n8k32_e4m3_f32(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  (void)d; (void)a; (void)b;
  asm volatile("trap;");
#endif
}

// True when the compilation target has FP8 mma (usable in `if constexpr`).
constexpr bool kHasFp8Mma =
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    true;
#else
    false;
#endif

}  // namespace qattn::dev

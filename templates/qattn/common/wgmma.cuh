// Warpgroup tensor-core products (wgmma.mma_async), sm_90a only: the int8 and fp8 (P·V) shapes of the
// quantized attention kernel, their shared-memory matrix descriptors, and the fences that order them.
//
// A warpgroup is 4 consecutive warps (128 threads); one wgmma computes a 64 x N tile, warp w of the
// group owning rows 16w .. 16w + 15. Per warp, the accumulator layout equals the mma.m16n8 C layout
// (d[j][0..1] = row g, columns 8j + 2t, 8j + 2t + 1; d[j][2..3] = row g + 8), and a register A
// operand equals the mma.m16n8k32 A fragment (mma.cuh). So code written for mma.sync fragments works
// unchanged on wgmma fragments.
//
// Shared-memory operands are 8-bit and K-major (rows of K contiguous bytes), stored in the swizzled
// layouts that int8::swizzle<CHUNKS> already writes: 16-byte chunk c of row r at chunk
// c ^ ((r / (8 / CHUNKS)) & (CHUNKS - 1)), which is the hardware's 128-, 64- or 32-byte swizzle for
// rows of 8, 4 or 2 chunks, provided the tile starts on a multiple of 1024 bytes.
//
// Ordering (PTX ISA, "asynchronous warpgroup level matrix multiply"):
//   - wgmma_fence() before the first wgmma that reads registers written by ordinary instructions;
//   - wgmma_commit() closes a group, wgmma_wait<N>() waits until at most N groups are pending;
//   - accumulators must not be touched between the wgmma and the wait: fence_operands() pins their
//     reads and writes to the program order around the asm statements;
//   - cp.async writes are generic-proxy writes; fence_proxy_async() makes them visible to wgmma.
#pragma once
#include "qattn/common/types.cuh"

namespace qattn::dev {

// Matrix descriptor of a K-major, swizzled 8-bit tile at shared address addr whose rows are
// row_bytes long (32, 64 or 128): 8-row groups are 8 * row_bytes apart (stride byte offset), and the
// swizzle mode is the one that matches the row length. Advance along K by adding bytes / 16.
__device__ __forceinline__ u64 wgmma_desc(u32 addr, int row_bytes) {
  const u64 mode = row_bytes == 128 ? 1 : (row_bytes == 64 ? 2 : 3);
  return static_cast<u64>((addr & 0x3FFFF) >> 4) | (static_cast<u64>(1) << 16) |
         (static_cast<u64>((8 * row_bytes) >> 4) << 32) | (mode << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

template <int ROWS>
__device__ __forceinline__ void fence_operands(int (&d)[ROWS][4]) {
#pragma unroll
  for (int j = 0; j < ROWS; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(d[j][e])::"memory");
}
template <int ROWS>
__device__ __forceinline__ void fence_operands(float (&d)[ROWS][4]) {
#pragma unroll
  for (int j = 0; j < ROWS; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}

// d = A (smem, desc a) * B (smem, desc b)^T + (scale_d ? d : 0), m64n64k32, s8 x s8 -> s32.
__device__ __forceinline__ void wgmma_m64n64k32_s8s8_ss(int (&d)[8][4], u64 a, u64 b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p;\n}\n"
      :
        "+r"(d[0][0]), "+r"(d[0][1]), "+r"(d[0][2]), "+r"(d[0][3]), "+r"(d[1][0]), "+r"(d[1][1]), "+r"(d[1][2]), "+r"(d[1][3]),
        "+r"(d[2][0]), "+r"(d[2][1]), "+r"(d[2][2]), "+r"(d[2][3]), "+r"(d[3][0]), "+r"(d[3][1]), "+r"(d[3][2]), "+r"(d[3][3]),
        "+r"(d[4][0]), "+r"(d[4][1]), "+r"(d[4][2]), "+r"(d[4][3]), "+r"(d[5][0]), "+r"(d[5][1]), "+r"(d[5][2]), "+r"(d[5][3]),
        "+r"(d[6][0]), "+r"(d[6][1]), "+r"(d[6][2]), "+r"(d[6][3]), "+r"(d[7][0]), "+r"(d[7][1]), "+r"(d[7][2]), "+r"(d[7][3])
      : "l"(a), "l"(b), "r"(scale_d));
}

// d[OFF ..] (+)= A (registers: the mma.m16n8k32 A fragment of this warp's 16 rows) * B (smem, desc b)^T,
// m64n64k32, u8 x s8 -> s32: rows OFF .. OFF + 7 of an accumulator of ROWS n8 blocks.
template <int OFF = 0, int ROWS>
__device__ __forceinline__ void wgmma_m64n64k32_u8s8_rs(int (&d)[ROWS][4], const u32 (&a)[4], u64 b) {
  static_assert(OFF + 8 <= ROWS, "accumulator rows out of range");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.s32.u8.s8 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p;\n}\n"
      :
        "+r"(d[OFF + 0][0]), "+r"(d[OFF + 0][1]), "+r"(d[OFF + 0][2]), "+r"(d[OFF + 0][3]), "+r"(d[OFF + 1][0]), "+r"(d[OFF + 1][1]), "+r"(d[OFF + 1][2]), "+r"(d[OFF + 1][3]),
        "+r"(d[OFF + 2][0]), "+r"(d[OFF + 2][1]), "+r"(d[OFF + 2][2]), "+r"(d[OFF + 2][3]), "+r"(d[OFF + 3][0]), "+r"(d[OFF + 3][1]), "+r"(d[OFF + 3][2]), "+r"(d[OFF + 3][3]),
        "+r"(d[OFF + 4][0]), "+r"(d[OFF + 4][1]), "+r"(d[OFF + 4][2]), "+r"(d[OFF + 4][3]), "+r"(d[OFF + 5][0]), "+r"(d[OFF + 5][1]), "+r"(d[OFF + 5][2]), "+r"(d[OFF + 5][3]),
        "+r"(d[OFF + 6][0]), "+r"(d[OFF + 6][1]), "+r"(d[OFF + 6][2]), "+r"(d[OFF + 6][3]), "+r"(d[OFF + 7][0]), "+r"(d[OFF + 7][1]), "+r"(d[OFF + 7][2]), "+r"(d[OFF + 7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1));
}

// d = A (smem, desc a) * B (smem, desc b)^T + (scale_d ? d : 0), m64n128k32, s8 x s8 -> s32.
__device__ __forceinline__ void wgmma_m64n128k32_s8s8_ss(int (&d)[16][4], u64 a, u64 b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p;\n}\n"
      :
        "+r"(d[0][0]), "+r"(d[0][1]), "+r"(d[0][2]), "+r"(d[0][3]), "+r"(d[1][0]), "+r"(d[1][1]), "+r"(d[1][2]), "+r"(d[1][3]),
        "+r"(d[2][0]), "+r"(d[2][1]), "+r"(d[2][2]), "+r"(d[2][3]), "+r"(d[3][0]), "+r"(d[3][1]), "+r"(d[3][2]), "+r"(d[3][3]),
        "+r"(d[4][0]), "+r"(d[4][1]), "+r"(d[4][2]), "+r"(d[4][3]), "+r"(d[5][0]), "+r"(d[5][1]), "+r"(d[5][2]), "+r"(d[5][3]),
        "+r"(d[6][0]), "+r"(d[6][1]), "+r"(d[6][2]), "+r"(d[6][3]), "+r"(d[7][0]), "+r"(d[7][1]), "+r"(d[7][2]), "+r"(d[7][3]),
        "+r"(d[8][0]), "+r"(d[8][1]), "+r"(d[8][2]), "+r"(d[8][3]), "+r"(d[9][0]), "+r"(d[9][1]), "+r"(d[9][2]), "+r"(d[9][3]),
        "+r"(d[10][0]), "+r"(d[10][1]), "+r"(d[10][2]), "+r"(d[10][3]), "+r"(d[11][0]), "+r"(d[11][1]), "+r"(d[11][2]), "+r"(d[11][3]),
        "+r"(d[12][0]), "+r"(d[12][1]), "+r"(d[12][2]), "+r"(d[12][3]), "+r"(d[13][0]), "+r"(d[13][1]), "+r"(d[13][2]), "+r"(d[13][3]),
        "+r"(d[14][0]), "+r"(d[14][1]), "+r"(d[14][2]), "+r"(d[14][3]), "+r"(d[15][0]), "+r"(d[15][1]), "+r"(d[15][2]), "+r"(d[15][3])
      : "l"(a), "l"(b), "r"(scale_d));
}

// The same, m64n128k32 (rows OFF .. OFF + 15).
template <int OFF = 0, int ROWS>
__device__ __forceinline__ void wgmma_m64n128k32_u8s8_rs(int (&d)[ROWS][4], const u32 (&a)[4], u64 b) {
  static_assert(OFF + 16 <= ROWS, "accumulator rows out of range");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.u8.s8 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p;\n}\n"
      :
        "+r"(d[OFF + 0][0]), "+r"(d[OFF + 0][1]), "+r"(d[OFF + 0][2]), "+r"(d[OFF + 0][3]), "+r"(d[OFF + 1][0]), "+r"(d[OFF + 1][1]), "+r"(d[OFF + 1][2]), "+r"(d[OFF + 1][3]),
        "+r"(d[OFF + 2][0]), "+r"(d[OFF + 2][1]), "+r"(d[OFF + 2][2]), "+r"(d[OFF + 2][3]), "+r"(d[OFF + 3][0]), "+r"(d[OFF + 3][1]), "+r"(d[OFF + 3][2]), "+r"(d[OFF + 3][3]),
        "+r"(d[OFF + 4][0]), "+r"(d[OFF + 4][1]), "+r"(d[OFF + 4][2]), "+r"(d[OFF + 4][3]), "+r"(d[OFF + 5][0]), "+r"(d[OFF + 5][1]), "+r"(d[OFF + 5][2]), "+r"(d[OFF + 5][3]),
        "+r"(d[OFF + 6][0]), "+r"(d[OFF + 6][1]), "+r"(d[OFF + 6][2]), "+r"(d[OFF + 6][3]), "+r"(d[OFF + 7][0]), "+r"(d[OFF + 7][1]), "+r"(d[OFF + 7][2]), "+r"(d[OFF + 7][3]),
        "+r"(d[OFF + 8][0]), "+r"(d[OFF + 8][1]), "+r"(d[OFF + 8][2]), "+r"(d[OFF + 8][3]), "+r"(d[OFF + 9][0]), "+r"(d[OFF + 9][1]), "+r"(d[OFF + 9][2]), "+r"(d[OFF + 9][3]),
        "+r"(d[OFF + 10][0]), "+r"(d[OFF + 10][1]), "+r"(d[OFF + 10][2]), "+r"(d[OFF + 10][3]), "+r"(d[OFF + 11][0]), "+r"(d[OFF + 11][1]), "+r"(d[OFF + 11][2]), "+r"(d[OFF + 11][3]),
        "+r"(d[OFF + 12][0]), "+r"(d[OFF + 12][1]), "+r"(d[OFF + 12][2]), "+r"(d[OFF + 12][3]), "+r"(d[OFF + 13][0]), "+r"(d[OFF + 13][1]), "+r"(d[OFF + 13][2]), "+r"(d[OFF + 13][3]),
        "+r"(d[OFF + 14][0]), "+r"(d[OFF + 14][1]), "+r"(d[OFF + 14][2]), "+r"(d[OFF + 14][3]), "+r"(d[OFF + 15][0]), "+r"(d[OFF + 15][1]), "+r"(d[OFF + 15][2]), "+r"(d[OFF + 15][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1));
}

// The same, m64n32k32 (rows OFF .. OFF + 3): the last 32 columns of O at d = 96.
template <int OFF = 0, int ROWS>
__device__ __forceinline__ void wgmma_m64n32k32_u8s8_rs(int (&d)[ROWS][4], const u32 (&a)[4], u64 b) {
  static_assert(OFF + 4 <= ROWS, "accumulator rows out of range");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.s32.u8.s8 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "{%16, %17, %18, %19}, %20, p;\n}\n"
      :
        "+r"(d[OFF + 0][0]), "+r"(d[OFF + 0][1]), "+r"(d[OFF + 0][2]), "+r"(d[OFF + 0][3]),
        "+r"(d[OFF + 1][0]), "+r"(d[OFF + 1][1]), "+r"(d[OFF + 1][2]), "+r"(d[OFF + 1][3]),
        "+r"(d[OFF + 2][0]), "+r"(d[OFF + 2][1]), "+r"(d[OFF + 2][2]), "+r"(d[OFF + 2][3]),
        "+r"(d[OFF + 3][0]), "+r"(d[OFF + 3][1]), "+r"(d[OFF + 3][2]), "+r"(d[OFF + 3][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1));
}

// d = A (smem, desc a) * B (smem, desc b)^T + (scale_d ? d : 0), m64n64k32, e4m3 x e4m3 -> f32.
__device__ __forceinline__ void wgmma_m64n64k32_e4m3_ss(float (&d)[8][4], u64 a, u64 b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1;\n}\n"
      :
        "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "l"(a), "l"(b), "r"(scale_d));
}

// d = A (smem, desc a) * B (smem, desc b)^T + (scale_d ? d : 0), m64n128k32, e4m3 x e4m3 -> f32.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_ss(float (&d)[16][4], u64 a, u64 b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1;\n}\n"
      :
        "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "l"(a), "l"(b), "r"(scale_d));
}

// The shapes by N (the kernel's bn for Q·K^T, its d for P·V).
// scale_d = 0: d = A·B (the accumulators' old values are ignored).
template <int N>
__device__ __forceinline__ void wgmma_s8s8_ss(int (&d)[N / 8][4], u64 a, u64 b, int scale_d = 1) {
  static_assert(N == 64 || N == 128, "wgmma_s8s8_ss: N must be 64 or 128");
  if constexpr (N == 64) wgmma_m64n64k32_s8s8_ss(d, a, b, scale_d);
  else wgmma_m64n128k32_s8s8_ss(d, a, b, scale_d);
}
// The same on e4m3 codes (fp32 accumulators).
template <int N>
__device__ __forceinline__ void wgmma_e4m3_ss(float (&d)[N / 8][4], u64 a, u64 b, int scale_d = 1) {
  static_assert(N == 64 || N == 128, "wgmma_e4m3_ss: N must be 64 or 128");
  if constexpr (N == 64) wgmma_m64n64k32_e4m3_ss(d, a, b, scale_d);
  else wgmma_m64n128k32_e4m3_ss(d, a, b, scale_d);
}
// The P·V product at N = the kernel's d, B's rows (the N dimension) row_bytes apart: d = 96 and 256
// take two shapes, the second on B's rows from 64 (d = 96) or 128 (d = 256) on, its own accumulators.
template <int N>
__device__ __forceinline__ void wgmma_u8s8_rs(int (&d)[N / 8][4], const u32 (&a)[4], u64 b, int row_bytes) {
  static_assert(N == 64 || N == 96 || N == 128 || N == 256, "wgmma_u8s8_rs: N must be 64, 96, 128 or 256");
  if constexpr (N == 64) {
    wgmma_m64n64k32_u8s8_rs(d, a, b);
  } else if constexpr (N == 96) {
    wgmma_m64n64k32_u8s8_rs<0>(d, a, b);
    wgmma_m64n32k32_u8s8_rs<8>(d, a, b + static_cast<u64>((64 * row_bytes) >> 4));
  } else if constexpr (N == 128) {
    wgmma_m64n128k32_u8s8_rs(d, a, b);
  } else {
    wgmma_m64n128k32_u8s8_rs<0>(d, a, b);
    wgmma_m64n128k32_u8s8_rs<16>(d, a, b + static_cast<u64>((128 * row_bytes) >> 4));
  }
}

// The same shape as wgmma_m64n64k32_u8s8_rs with e4m3 x e4m3 -> f32 (P̃ from registers, fp8 V^T in smem):
// rows OFF .. OFF + 7 of a float accumulator; SCALE_D = 0 ignores their old values (a fresh sum).
template <int OFF = 0, int SCALE_D = 1, int ROWS>
__device__ __forceinline__ void wgmma_m64n64k32_e4m3_rs(float (&d)[ROWS][4], const u32 (&a)[4], u64 b) {
  static_assert(OFF + 8 <= ROWS, "accumulator rows out of range");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
      :
        "+f"(d[OFF + 0][0]), "+f"(d[OFF + 0][1]), "+f"(d[OFF + 0][2]), "+f"(d[OFF + 0][3]), "+f"(d[OFF + 1][0]), "+f"(d[OFF + 1][1]), "+f"(d[OFF + 1][2]), "+f"(d[OFF + 1][3]),
        "+f"(d[OFF + 2][0]), "+f"(d[OFF + 2][1]), "+f"(d[OFF + 2][2]), "+f"(d[OFF + 2][3]), "+f"(d[OFF + 3][0]), "+f"(d[OFF + 3][1]), "+f"(d[OFF + 3][2]), "+f"(d[OFF + 3][3]),
        "+f"(d[OFF + 4][0]), "+f"(d[OFF + 4][1]), "+f"(d[OFF + 4][2]), "+f"(d[OFF + 4][3]), "+f"(d[OFF + 5][0]), "+f"(d[OFF + 5][1]), "+f"(d[OFF + 5][2]), "+f"(d[OFF + 5][3]),
        "+f"(d[OFF + 6][0]), "+f"(d[OFF + 6][1]), "+f"(d[OFF + 6][2]), "+f"(d[OFF + 6][3]), "+f"(d[OFF + 7][0]), "+f"(d[OFF + 7][1]), "+f"(d[OFF + 7][2]), "+f"(d[OFF + 7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(SCALE_D));
}

// The same shape as wgmma_m64n128k32_u8s8_rs with e4m3 x e4m3 -> f32 (P̃ from registers, fp8 V^T in smem):
// rows OFF .. OFF + 15 of a float accumulator; SCALE_D = 0 ignores their old values (a fresh sum).
template <int OFF = 0, int SCALE_D = 1, int ROWS>
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_rs(float (&d)[ROWS][4], const u32 (&a)[4], u64 b) {
  static_assert(OFF + 16 <= ROWS, "accumulator rows out of range");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      :
        "+f"(d[OFF + 0][0]), "+f"(d[OFF + 0][1]), "+f"(d[OFF + 0][2]), "+f"(d[OFF + 0][3]), "+f"(d[OFF + 1][0]), "+f"(d[OFF + 1][1]), "+f"(d[OFF + 1][2]), "+f"(d[OFF + 1][3]),
        "+f"(d[OFF + 2][0]), "+f"(d[OFF + 2][1]), "+f"(d[OFF + 2][2]), "+f"(d[OFF + 2][3]), "+f"(d[OFF + 3][0]), "+f"(d[OFF + 3][1]), "+f"(d[OFF + 3][2]), "+f"(d[OFF + 3][3]),
        "+f"(d[OFF + 4][0]), "+f"(d[OFF + 4][1]), "+f"(d[OFF + 4][2]), "+f"(d[OFF + 4][3]), "+f"(d[OFF + 5][0]), "+f"(d[OFF + 5][1]), "+f"(d[OFF + 5][2]), "+f"(d[OFF + 5][3]),
        "+f"(d[OFF + 6][0]), "+f"(d[OFF + 6][1]), "+f"(d[OFF + 6][2]), "+f"(d[OFF + 6][3]), "+f"(d[OFF + 7][0]), "+f"(d[OFF + 7][1]), "+f"(d[OFF + 7][2]), "+f"(d[OFF + 7][3]),
        "+f"(d[OFF + 8][0]), "+f"(d[OFF + 8][1]), "+f"(d[OFF + 8][2]), "+f"(d[OFF + 8][3]), "+f"(d[OFF + 9][0]), "+f"(d[OFF + 9][1]), "+f"(d[OFF + 9][2]), "+f"(d[OFF + 9][3]),
        "+f"(d[OFF + 10][0]), "+f"(d[OFF + 10][1]), "+f"(d[OFF + 10][2]), "+f"(d[OFF + 10][3]), "+f"(d[OFF + 11][0]), "+f"(d[OFF + 11][1]), "+f"(d[OFF + 11][2]), "+f"(d[OFF + 11][3]),
        "+f"(d[OFF + 12][0]), "+f"(d[OFF + 12][1]), "+f"(d[OFF + 12][2]), "+f"(d[OFF + 12][3]), "+f"(d[OFF + 13][0]), "+f"(d[OFF + 13][1]), "+f"(d[OFF + 13][2]), "+f"(d[OFF + 13][3]),
        "+f"(d[OFF + 14][0]), "+f"(d[OFF + 14][1]), "+f"(d[OFF + 14][2]), "+f"(d[OFF + 14][3]), "+f"(d[OFF + 15][0]), "+f"(d[OFF + 15][1]), "+f"(d[OFF + 15][2]), "+f"(d[OFF + 15][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(SCALE_D));
}

// The same shape as wgmma_m64n32k32_u8s8_rs with e4m3 x e4m3 -> f32 (P̃ from registers, fp8 V^T in smem):
// rows OFF .. OFF + 3 of a float accumulator; SCALE_D = 0 ignores their old values (a fresh sum).
template <int OFF = 0, int SCALE_D = 1, int ROWS>
__device__ __forceinline__ void wgmma_m64n32k32_e4m3_rs(float (&d)[ROWS][4], const u32 (&a)[4], u64 b) {
  static_assert(OFF + 4 <= ROWS, "accumulator rows out of range");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "{%16, %17, %18, %19}, %20, p, 1, 1;\n}\n"
      :
        "+f"(d[OFF + 0][0]), "+f"(d[OFF + 0][1]), "+f"(d[OFF + 0][2]), "+f"(d[OFF + 0][3]), "+f"(d[OFF + 1][0]), "+f"(d[OFF + 1][1]), "+f"(d[OFF + 1][2]), "+f"(d[OFF + 1][3]),
        "+f"(d[OFF + 2][0]), "+f"(d[OFF + 2][1]), "+f"(d[OFF + 2][2]), "+f"(d[OFF + 2][3]), "+f"(d[OFF + 3][0]), "+f"(d[OFF + 3][1]), "+f"(d[OFF + 3][2]), "+f"(d[OFF + 3][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(SCALE_D));
}

// P·V with fp8 operands at N = the kernel's d (the shapes split as in wgmma_u8s8_rs).
template <int N, int SCALE_D = 1>
__device__ __forceinline__ void wgmma_e4m3_rs(float (&d)[N / 8][4], const u32 (&a)[4], u64 b, int row_bytes) {
  static_assert(N == 64 || N == 96 || N == 128 || N == 256, "wgmma_e4m3_rs: N must be 64, 96, 128 or 256");
  if constexpr (N == 64) {
    wgmma_m64n64k32_e4m3_rs<0, SCALE_D>(d, a, b);
  } else if constexpr (N == 96) {
    wgmma_m64n64k32_e4m3_rs<0, SCALE_D>(d, a, b);
    wgmma_m64n32k32_e4m3_rs<8, SCALE_D>(d, a, b + static_cast<u64>((64 * row_bytes) >> 4));
  } else if constexpr (N == 128) {
    wgmma_m64n128k32_e4m3_rs<0, SCALE_D>(d, a, b);
  } else {
    wgmma_m64n128k32_e4m3_rs<0, SCALE_D>(d, a, b);
    wgmma_m64n128k32_e4m3_rs<16, SCALE_D>(d, a, b + static_cast<u64>((128 * row_bytes) >> 4));
  }
}

}  // namespace qattn::dev

// f16 / bf16 warpgroup products with both operands in shared memory (wgmma.mma_async, sm_90a), for the
// wgmma form of the linear GEMM (gemm_wgmma.cuh):  d (64 x N, fp32) += A (64 x 16) · B (N x 16)^T.
//
// A (the 64 token rows of a slab) and B (N weight rows) are K-major: rows of K-contiguous 16-bit
// elements, which wgmma takes for 16-bit types without transposition (imm-trans-a = imm-trans-b = 0).
// Their descriptors are dev::wgmma_desc(addr, 128) (common/wgmma.cuh: the 128-byte swizzle, 8-row groups
// 1024 bytes apart); a k16 step inside a 64-element row advances the start address by 32 bytes.
// scale-d is always 1: the kernel zeroes its accumulators once, so every product adds.
//
// The accumulator fragment (PTX ISA, "wgmma .m64nNk16 register fragment D"), per warp w of the
// warpgroup, lane 4g + t:  d[j][0..1] = row 16w + g, columns 8j + 2t, 8j + 2t + 1;  d[j][2..3] = row
// 16w + g + 8 — the mma.m16n8 C layout, repeated over j = 0 .. N / 8 - 1.
//
// The accumulator lists are spelled out (the asm needs literal operand numbers); N / 2 registers, then
// the two descriptors and the scale-d immediate.
#pragma once
#include "qattn/abi.h"
#include "qattn/common/types.cuh"

#define QATTN_WG_REGS16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define QATTN_WG_REGS32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define QATTN_WG_REGS64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "  \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define QATTN_WG_REGS128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "  \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "  \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "  \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "  \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "  \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

#define QATTN_WG_D1(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define QATTN_WG_D4(j) QATTN_WG_D1(j), QATTN_WG_D1(j + 1), QATTN_WG_D1(j + 2), QATTN_WG_D1(j + 3)
#define QATTN_WG_D16(j) QATTN_WG_D4(j), QATTN_WG_D4(j + 4), QATTN_WG_D4(j + 8), QATTN_WG_D4(j + 12)

// One product of shape SHAPE on TYPE x TYPE (f16 or bf16) -> f32; DESCS / SCALE: the operand numbers
// after the accumulators.
#define QATTN_WG_SS(SHAPE, TYPE, REGS, DESCS, SCALE, ...)                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE ", 0;\n"                                       \
               "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPE "." TYPE " " REGS ", " DESCS ", p, 1, 1, 0, 0;\n}\n" \
               : __VA_ARGS__                                                                            \
               : "l"(a), "l"(b), "n"(1))
#define QATTN_WG_SS_AB(SHAPE, REGS, DESCS, SCALE, ...)                  \
  if constexpr (A == Fmt::fp16) QATTN_WG_SS(SHAPE, "f16", REGS, DESCS, SCALE, __VA_ARGS__); \
  else QATTN_WG_SS(SHAPE, "bf16", REGS, DESCS, SCALE, __VA_ARGS__)

namespace qattn::linear {

// d += A · B^T, m64nNk16, A's 16-bit type (A and B alike), fp32 accumulators; a, b: smem descriptors.
template <int N, Fmt A>
__device__ __forceinline__ void wgmma_f16_ss(float (&d)[N / 8][4], dev::u64 a, dev::u64 b) {
  static_assert(A == Fmt::fp16 || A == Fmt::bf16, "wgmma_f16_ss: fp16 or bf16 operands");
  static_assert(N == 32 || N == 64 || N == 128 || N == 256, "wgmma_f16_ss: N must be 32, 64, 128 or 256");
  if constexpr (N == 32) {
    QATTN_WG_SS_AB("m64n32k16", QATTN_WG_REGS16, "%16, %17", "%18", QATTN_WG_D4(0));
  } else if constexpr (N == 64) {
    QATTN_WG_SS_AB("m64n64k16", QATTN_WG_REGS32, "%32, %33", "%34", QATTN_WG_D4(0), QATTN_WG_D4(4));
  } else if constexpr (N == 128) {
    QATTN_WG_SS_AB("m64n128k16", QATTN_WG_REGS64, "%64, %65", "%66", QATTN_WG_D16(0));
  } else {
    QATTN_WG_SS_AB("m64n256k16", QATTN_WG_REGS128, "%128, %129", "%130", QATTN_WG_D16(0), QATTN_WG_D16(16));
  }
}

}  // namespace qattn::linear

#undef QATTN_WG_SS_AB
#undef QATTN_WG_SS
#undef QATTN_WG_D16
#undef QATTN_WG_D4
#undef QATTN_WG_D1
#undef QATTN_WG_REGS128
#undef QATTN_WG_REGS64
#undef QATTN_WG_REGS32
#undef QATTN_WG_REGS16

// float -> OCP FP8 e4m3 conversion in registers (cvt.rn.satfinite.e4m3x2.f32, sm_89+): round to nearest
// even, saturating at +-448, the same rounding as the host/device encoder of qattn/decode/fp8_e4m3.h.
#pragma once
#include "qattn/common/types.cuh"

namespace qattn::dev {

// Four floats -> four e4m3 bytes, a in the lowest byte (the k order of an 8-bit mma A/B register).
// Only sm_89+ has the instruction; elsewhere it traps like mma_m16n8k32_e4m3_f32 (a wrong dispatch
// fails loudly rather than computing garbage).
__device__ __forceinline__ u32 e4m3x4(float a, float b, float c, float d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short lo, hi;
  // The first source lands in the upper byte of the pair.
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(b), "f"(a));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(d), "f"(c));
  return static_cast<u32>(lo) | (static_cast<u32>(hi) << 16);
#else
  (void)a; (void)b; (void)c; (void)d;
  asm volatile("trap;");
  return 0u;
#endif
}

}  // namespace qattn::dev

// float -> OCP FP8 e4m3 conversion in registers (cvt.rn.satfinite.e4m3x2.f32, sm_89+): round to nearest
// even, saturating at +-448, the same rounding as the host/device encoder of qattn/decode/fp8_e4m3.h.
#pragma once
#include "qattn/common/types.cuh"
#include "qattn/decode/fp8_e4m3.h"

namespace qattn::dev {

// Two floats -> two e4m3 bytes, a in the low byte. sm_89+: one conversion instruction; older archs (where
// no fp8 kernel runs, but the quantizer passes are still compiled) take the shared software encoder,
// which rounds the same way.
__device__ __forceinline__ u32 e4m3x2(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(b), "f"(a));   // the first source goes high
  return pair;
#else
  return static_cast<u32>(fp8::encode_e4m3(a)) | (static_cast<u32>(fp8::encode_e4m3(b)) << 8);
#endif
}

// Four floats -> four e4m3 bytes, a in the lowest byte (the k order of an 8-bit mma A/B register).
__device__ __forceinline__ u32 e4m3x4(float a, float b, float c, float d) { return e4m3x2(a, b) | (e4m3x2(c, d) << 16); }

}  // namespace qattn::dev

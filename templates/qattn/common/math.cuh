// Fast math and warp reductions used by softmax-style epilogues.
#pragma once
#include "qattn/common/types.cuh"

namespace qattn::dev {

constexpr float kLog2e = 1.4426950408889634f;   // log2(e): exp(x) = exp2(x * kLog2e)
constexpr float kLn2 = 0.6931471805599453f;     // ln(2):   ln(x) = log2(x) * kLn2

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// 2^x on the special-function unit (one MUFU op, ~2 ulp; flushes denormal results to zero, which
// is harmless for softmax probabilities). ex2(-inf) = +0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// log2(x) on the special-function unit; log2(0) = -inf.
__device__ __forceinline__ float log2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 1/x, approximate (~1 ulp), for epilogue normalisation.
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ __forceinline__ int shfl_xor(int v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ __forceinline__ u32 shfl_xor(u32 v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }

// Reductions over the 4 lanes of a quad (lanes 4g..4g+3): in mma C fragments those four lanes hold
// the columns of the same two rows, so a row reduction is a quad reduction.
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, shfl_xor(v, 1));
  return fmaxf(v, shfl_xor(v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += shfl_xor(v, 1);
  return v + shfl_xor(v, 2);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, shfl_xor(v, m));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += shfl_xor(v, m);
  return v;
}

}  // namespace qattn::dev

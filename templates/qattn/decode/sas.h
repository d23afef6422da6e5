// TurboAttention's SAS (sparsity-based softmax approximation), the `softmax=sas` mode of decode:
//   e^x = LUT[n] * POLY(x + n)  for  -6 < x <= 0,  n = floor(-x) in 0..5,  x + n in (-1, 0]
//   e^x = 0                     for  x <= -6   (sparsification threshold T_sas = -6)
// POLY is the least-squares cubic of e^x on [-1, 0] (TurboAttention Eq. 15 as published:
// 0.1025 x^3 + 0.4626 x^2 + 0.9922 x + 0.9996). Everything after the split runs in FP16: the fraction,
// the coefficients and the LUT entries are rounded to fp16 (round to nearest even), the cubic is three
// fp16 FMAs (Horner) and the LUT product one fp16 multiply, each rounded once; the split itself
// (floor, subtract) is exact in fp32.
// The constants are shared with the host; the host's reference emulates the fp16 steps exactly
// (tests/common/sas_reference.hpp), so the CPU test bounds what the device computes.
#pragma once

namespace qattn::sas {

constexpr float kThreshold = -6.f;
constexpr int kLutSize = 6;   // e^0 .. e^-5
constexpr float kLut[kLutSize] = {1.0f, 0.36787944f, 0.13533528f, 0.049787068f, 0.018315639f, 0.0067379470f};
constexpr float kC3 = 0.1025f, kC2 = 0.4626f, kC1 = 0.9922f, kC0 = 0.9996f;

}  // namespace qattn::sas

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "qattn/common/convert.cuh"
#include "qattn/decode/kv_dequant.cuh"

namespace qattn::sas {

using dev::float_to_half;
using dev::half_to_float;
using dev::hfma2;
using dev::hmul2;

// Scalar fp16 steps, each rounded once (the packed forms come from kv_dequant.cuh).
__device__ __forceinline__ dev::u16 fma_f16(dev::u16 a, dev::u16 b, dev::u16 c) {
  dev::u16 d;
  asm("fma.rn.f16 %0, %1, %2, %3;" : "=h"(d) : "h"(a), "h"(b), "h"(c));
  return d;
}
__device__ __forceinline__ dev::u16 mul_f16(dev::u16 a, dev::u16 b) {
  dev::u16 d;
  asm("mul.rn.f16 %0, %1, %2;" : "=h"(d) : "h"(a), "h"(b));
  return d;
}

// e^-n from the table by a select chain rather than an indexed array: no local memory, and the host
// table stays host-only.
__device__ __forceinline__ float lut_entry(int n) {
  return n == 0 ? kLut[0] : n == 1 ? kLut[1] : n == 2 ? kLut[2] : n == 3 ? kLut[3] : n == 4 ? kLut[4] : kLut[5];
}

// SAS(x) for x <= 0 (x = score - running max, natural-log units); 0 at or below the threshold and for -inf.
__device__ __forceinline__ float exp(float x) {
  if (!(x > kThreshold)) return 0.f;
  const int n = min(kLutSize - 1, static_cast<int>(floorf(-x)));
  const dev::u16 f = float_to_half(x + static_cast<float>(n));
  dev::u16 p = fma_f16(float_to_half(kC3), f, float_to_half(kC2));
  p = fma_f16(p, f, float_to_half(kC1));
  p = fma_f16(p, f, float_to_half(kC0));
  return half_to_float(mul_f16(p, float_to_half(lut_entry(n))));
}

__device__ __forceinline__ dev::u32 splat(float x) {
  const dev::u32 h = float_to_half(x);
  return h | (h << 16);
}
// SAS of two values at once: the same fp16 operations as exp() (fma.rn.f16x2 rounds each half as
// fma.rn.f16 does), on packed pairs, so half the fp16 instructions.
__device__ __forceinline__ void exp2x(float x0, float x1, float& e0, float& e1) {
  const bool in0 = x0 > kThreshold, in1 = x1 > kThreshold;
  const int n0 = in0 ? min(kLutSize - 1, static_cast<int>(floorf(-x0))) : 0;
  const int n1 = in1 ? min(kLutSize - 1, static_cast<int>(floorf(-x1))) : 0;
  const dev::u32 f = dev::pack_half2(in0 ? x0 + static_cast<float>(n0) : 0.f, in1 ? x1 + static_cast<float>(n1) : 0.f);
  dev::u32 p = hfma2(splat(kC3), f, splat(kC2));
  p = hfma2(p, f, splat(kC1));
  p = hfma2(p, f, splat(kC0));
  p = hmul2(p, static_cast<dev::u32>(float_to_half(lut_entry(n0))) | (static_cast<dev::u32>(float_to_half(lut_entry(n1))) << 16));
  e0 = in0 ? half_to_float(static_cast<dev::u16>(p & 0xffffu)) : 0.f;
  e1 = in1 ? half_to_float(static_cast<dev::u16>(p >> 16)) : 0.f;
}

}  // namespace qattn::sas
#endif

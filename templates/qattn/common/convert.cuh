// Conversions between fp32 and the 16-bit float formats (fp16, bf16), on bit patterns.
// Round-to-nearest-even everywhere (cvt.rn), matching what PyTorch does when it casts.
#pragma once
#include "qattn/abi.h"
#include "qattn/common/types.cuh"

namespace qattn::dev {

// Packs two floats into one 32-bit register of two fp16: `lo` in bits 0..15 (the lower column / k
// index of an mma fragment pair), `hi` in bits 16..31.
__device__ __forceinline__ u32 pack_half2(float lo, float hi) {
  u32 r;
  // cvt.rn.f16x2.f32 d, a, b puts a in the upper half and b in the lower half.
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ u32 pack_bf162(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ u16 float_to_half(float x) {
  u16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ u16 float_to_bf16(float x) {
  u16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ float half_to_float(u16 h) {
  float r;
  asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));
  return r;
}

// bf16 is the upper half of an fp32: widening is a shift, exact.
__device__ __forceinline__ float bf16_to_float(u16 b) { return __uint_as_float(u32(b) << 16); }

// Both halves of a packed pair, lower half first.
__device__ __forceinline__ void unpack_half2(u32 v, float& lo, float& hi) {
  lo = half_to_float(u16(v & 0xffffu));
  hi = half_to_float(u16(v >> 16));
}
__device__ __forceinline__ void unpack_bf162(u32 v, float& lo, float& hi) {
  lo = __uint_as_float(v << 16);
  hi = __uint_as_float(v & 0xffff0000u);
}

// Format-generic forms for templates parameterised on qattn::Fmt (fp16 or bf16 only).
template <Fmt F>
__device__ __forceinline__ u32 pack2(float lo, float hi) {
  static_assert(F == Fmt::fp16 || F == Fmt::bf16, "pack2: only fp16 and bf16");
  if constexpr (F == Fmt::fp16) return pack_half2(lo, hi);
  else return pack_bf162(lo, hi);
}

template <Fmt F>
__device__ __forceinline__ u16 from_float(float x) {
  static_assert(F == Fmt::fp16 || F == Fmt::bf16, "from_float: only fp16 and bf16");
  if constexpr (F == Fmt::fp16) return float_to_half(x);
  else return float_to_bf16(x);
}

template <Fmt F>
__device__ __forceinline__ float to_float(u16 x) {
  static_assert(F == Fmt::fp16 || F == Fmt::bf16, "to_float: only fp16 and bf16");
  if constexpr (F == Fmt::fp16) return half_to_float(x);
  else return bf16_to_float(x);
}

template <Fmt F>
__device__ __forceinline__ void unpack2(u32 v, float& lo, float& hi) {
  static_assert(F == Fmt::fp16 || F == Fmt::bf16, "unpack2: only fp16 and bf16");
  if constexpr (F == Fmt::fp16) unpack_half2(v, lo, hi);
  else unpack_bf162(v, lo, hi);
}

// Packed fp16 arithmetic on two halves at once (round to nearest even).
__device__ __forceinline__ u32 hsub2(u32 a, u32 b) {
  u32 d;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ u32 hmul2(u32 a, u32 b) {
  u32 d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ u32 hfma2(u32 a, u32 b, u32 c) {
  u32 d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

}  // namespace qattn::dev

// The signed Hadamard rotation of Q and K rows (rotate=hadamard; the transform, its blocks and signs are
// in quant_config.h) on the row quantizer's layout: a thread holds 8 consecutive channels c0 .. c0 + 7
// of a row, c0 = 8 · (its lane within the row's aligned group of lanes_per_row(D) lanes). A block of B
// channels is then B / 8 adjacent lanes: the butterflies of distance 1, 2, 4 run in the thread, those of
// distance 8 .. B / 2 between lanes (shuffle xor B / 8 .. 1 lanes apart). Every lane of a row group must
// call it together (shuffles). Each butterfly is one fp32 add (lower channel: a + b) or subtract (upper:
// a - b), in the same order as the CPU reference (tests/common/quant_reference.cpp), so the rotated
// values, and with them the codes, match it exactly; the K side's 1 / B is a power of two (exact).
#pragma once

#include "qattn/quant/quant_device.cuh"

namespace qattn {
namespace quant {

// Bit i: channel c0 + i is negated (rotation_negates of its index within the block). Once per thread.
template <int D>
__device__ __forceinline__ unsigned rotation_sign_bits(int c0) {
  constexpr int kBlock = rotation_block(D);
  unsigned bits = 0;
#pragma unroll
  for (int i = 0; i < kVecElems; ++i) bits |= rotation_negates((c0 + i) % kBlock) ? 1u << i : 0u;
  return bits;
}

template <int D, int Rotate>
__device__ __forceinline__ void rotate_row(float (&v)[kVecElems], int c0, unsigned sign_bits) {
  static_assert(Rotate == kRotateQ || Rotate == kRotateK, "rotate_row: kRotateQ or kRotateK");
  constexpr int kBlock = rotation_block(D);
  static_assert(kBlock >= 16 && kBlock / kVecElems <= lanes_per_row(D), "a rotation block spans whole lanes of one row");
#pragma unroll
  for (int i = 0; i < kVecElems; ++i)
    if (sign_bits >> i & 1u) v[i] = -v[i];
#pragma unroll
  for (int h = 1; h < kVecElems; h *= 2)
#pragma unroll
    for (int i = 0; i < kVecElems; ++i)
      if (!(i & h)) {
        const float a = v[i], b = v[i + h];
        v[i] = a + b;
        v[i + h] = a - b;
      }
  const int vec = c0 / kVecElems;
#pragma unroll
  for (int lanes = 1; lanes < kBlock / kVecElems; lanes *= 2) {
    const bool upper = (vec & lanes) != 0;
#pragma unroll
    for (int i = 0; i < kVecElems; ++i) {
      const float other = __shfl_xor_sync(0xffffffffu, v[i], lanes);
      v[i] = upper ? other - v[i] : v[i] + other;
    }
  }
  if constexpr (Rotate == kRotateK) {
#pragma unroll
    for (int i = 0; i < kVecElems; ++i) v[i] *= 1.f / kBlock;
  }
}

}  // namespace quant
}  // namespace qattn

// XOR swizzle of shared-memory tiles made of 16-byte chunks.
//
// A tile row of C chunks (C = 8 for 64 fp16 / 128 int8 elements, 16 for 128 fp16, ...) is stored with
// chunk c of row r at physical chunk  c ^ swizzle_key<C>(r). The 8 rows an ldmatrix tile (or one
// 8-lane phase of a cp.async / 16-byte store) touches then land in 8 different 16-byte bank groups, so
// neither the row-wise writes nor the column-wise fragment reads conflict, with no padding bytes.
//   C a multiple of 8 (rows of 128-byte multiples): key r % 8, the XOR spans 8 chunks.
//   C = 4 mod 8 (e.g. 12: 96 fp16 elements): consecutive rows start 4 bank groups apart, so r % 2
//     already separates two halves of the banks; the key (r / 2) % 4 spreads the rest and the XOR spans
//     4 chunks (it flips chunk bits 0-1 only, so a chunk never leaves its row).
// swizzle_span<C>() is the XOR span: logical chunks c and c + span keep the same key, so they are
// exactly span * 16 bytes apart in every row (fragment addresses are one base + immediate offsets).
#pragma once
#include "qattn/common/types.cuh"

namespace qattn::dev {

template <int CHUNKS>
__device__ __forceinline__ constexpr int swizzle_span() {
  static_assert(CHUNKS % 4 == 0, "swizzled tiles need rows of a multiple of 4 chunks (64 bytes)");
  return CHUNKS % 8 == 0 ? 8 : 4;
}

template <int CHUNKS>
__device__ __forceinline__ constexpr int swizzle_key(int row) {
  return swizzle_span<CHUNKS>() == 8 ? (row & 7) : ((row >> 1) & 3);
}

// Byte offset of logical (row, chunk) in a swizzled tile whose rows hold CHUNKS 16-byte chunks.
template <int CHUNKS>
__device__ __forceinline__ constexpr u32 swizzled_offset(int row, int chunk) {
  return u32(row * CHUNKS + (chunk ^ swizzle_key<CHUNKS>(row))) * 16u;
}

}  // namespace qattn::dev

// XOR swizzle of shared-memory tiles made of 16-byte chunks.
//
// A tile row of C chunks (C = 8 for 64 fp16 / 128 int8 elements, 16 for 128 fp16, ...) is stored with
// chunk c of row r at physical chunk  c ^ (r % 8). The 8 rows an ldmatrix tile (or one 8-lane phase
// of a cp.async / 16-byte store) touches then land in 8 different 16-byte bank groups, so neither
// the row-wise writes nor the column-wise fragment reads conflict, with no padding bytes. Requires
// C to be a multiple of 8 (row length a multiple of 128 bytes).
#pragma once
#include "qattn/common/types.cuh"

namespace qattn::dev {

// Byte offset of logical (row, chunk) in a swizzled tile whose rows hold CHUNKS 16-byte chunks.
template <int CHUNKS>
__device__ __forceinline__ constexpr u32 swizzled_offset(int row, int chunk) {
  static_assert(CHUNKS % 8 == 0, "swizzled tiles need rows of a multiple of 8 chunks (128 bytes)");
  return u32(row * CHUNKS + (chunk ^ (row & 7))) * 16u;
}

}  // namespace qattn::dev

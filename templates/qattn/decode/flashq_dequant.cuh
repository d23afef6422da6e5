// Register-level decoding of FlashQ blocks (layout: the flashq paragraph of qattn/decode/kv_layout.h)
// for the decode kernels: codes -> the block's INT8 values x8 = s_c * code + m_c as exact fp16 integers
// (|x8| <= 127 + s_c, well inside fp16's 11-bit significand); alpha (fp32) is applied outside.
//
// int4 codes come out of a 32-bit word as the pairs (c_k, c_{k+4}) (kv_dequant.cuh's int4_pair); int2
// codes, 16 per word at bits 2e, as (c_k, c_{k+8}): one shift and one AND/OR pair per two codes.
// The per-channel (s_c, m_c) of a block are turned once per block into a table of fp16 pairs in shared
// memory, so a fragment's parameters are two 4-byte loads and a byte permute.
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"
#include "qattn/decode/kv_dequant.cuh"
#include "qattn/decode/kv_layout.h"

namespace qattn::dev {

// Codes k and k + 8 of an int2 word as the fp16 pair (q_k, q_{k+8}), exact (k = 0..7).
__device__ __forceinline__ u32 int2_pair(u32 w, int k) {
  return hsub2(((w >> (2 * k)) & 0x00030003u) | kHalf2_1024, kHalf2_1024);
}

// Writes the block's (s_c, m_c) as fp16 pairs (s in the low half) to table[0 .. D) (shared memory);
// the warp's lanes take channels in turn. The caller orders it (__syncwarp) before the table is read.
template <int D>
__device__ __forceinline__ void flashq_param_table(const char* block, u32* table, int lane) {
  const unsigned char* s = reinterpret_cast<const unsigned char*>(block) + kv::kFlashQHeaderBytes;
  const signed char* m = reinterpret_cast<const signed char*>(s + D);
#pragma unroll
  for (int c = lane; c < D; c += 32) table[c] = pack_half2(float(s[c]), float(m[c]));
}

// (s, m) of channels c1 and c2 as the pairs (s1, s2) and (m1, m2).
__device__ __forceinline__ void flashq_pair_params(const u32* table, int c1, int c2, u32& s, u32& m) {
  const u32 e1 = table[c1], e2 = table[c2];
  s = prmt(e1, e2, 0x5410u);
  m = prmt(e1, e2, 0x7632u);
}

// Copies block `blk` of sequence b into a pipeline stage (cp.async, 16-byte units, the warp's lanes in
// turn): K from byte off_k of its page to dst_k, V from off_v to dst_v, blocks of KB / VB bits.
// Contiguous caches are pages b * max_blocks + blk (max_blocks in table_stride), paged ones the table's.
template <int D, bool PAGED, int KB, int VB>
__device__ __forceinline__ void flashq_load_block(const DecodeParams& p, u32 dst_k, u32 dst_v, int b, int blk, int off_k,
                                                  int off_v, int lane) {
  const long long page = PAGED ? p.block_table[(long long)b * p.table_stride + blk] : (long long)b * p.table_stride + blk;
  const unsigned char* k = p.k.ptr + page * p.k.page_stride + off_k;
  const unsigned char* v = p.v.ptr + page * p.v.page_stride + off_v;
  constexpr int kUnitsK = kv::flashq_block_bytes(KB, D) / 16, kUnitsV = kv::flashq_block_bytes(VB, D) / 16;
#pragma unroll 4
  for (int u = lane; u < kUnitsK; u += 32) cp_async_16(dst_k + u * 16, k + u * 16, true);
#pragma unroll 4
  for (int u = lane; u < kUnitsV; u += 32) cp_async_16(dst_v + u * 16, v + u * 16, true);
}

// The block's alpha (bytes 0..3).
__device__ __forceinline__ float flashq_alpha(const char* block) { return *reinterpret_cast<const float*>(block); }

}  // namespace qattn::dev

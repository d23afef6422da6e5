// Copies of one warp chunk of BN cache rows of K and V (the layout of kv_layout.h) into a pipeline
// stage, by cp.async in 16-byte units: shared by the decode kernels (decode_mma.cuh, decode_gemv.cuh).
// ROW: bytes per row; SWIZZLE: fp16/bf16 tiles land in the swizzled order that ldmatrix reads (the
// mma kernel), else rows land in place.
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"

namespace qattn::decode {

template <int ROW, int BN, bool PAGED, bool SWIZZLE>
struct ChunkLoader {
  static constexpr int kRow = ROW;
  static constexpr int kUnits = BN * ROW / 16;
  static_assert(BN * ROW % 16 == 0, "chunks are copied in 16-byte units");
  using u32 = dev::u32;

  // Byte offsets of token t's row in the K and V caches.
  static __device__ __forceinline__ void row_offsets(const DecodeParams& p, int b, int h, int t, long long& ok,
                                                     long long& ov) {
    long long page, slot;
    if constexpr (PAGED) {
      page = p.block_table[(long long)b * p.table_stride + t / p.page_size];
      slot = t % p.page_size;
    } else {
      page = b;
      slot = t;
    }
    slot_offsets(p, page, h, slot, ok, ov);
  }

  static __device__ __forceinline__ void slot_offsets(const DecodeParams& p, long long page, int h, long long slot,
                                                      long long& ok, long long& ov) {
    ok = page * p.k.page_stride + h * p.k.head_stride + slot * kRow;
    ov = page * p.v.page_stride + h * p.v.head_stride + slot * kRow;
  }

  // Copies `units` 16-byte units of contiguous cache bytes, starting at byte offsets ok / ov of the K and
  // V caches, into the stage from unit `first` on.
  static __device__ __forceinline__ void copy_run(const DecodeParams& p, u32 dst_k, u32 dst_v, long long ok,
                                                  long long ov, int first, int units, int lane) {
    const unsigned char* src_k = p.k.ptr + ok;
    const unsigned char* src_v = p.v.ptr + ov;
#pragma unroll 4
    for (int u = lane; u < units; u += 32) {
      const int unit = first + u;
      u32 dst = unit * 16;
      if constexpr (SWIZZLE) dst = dev::swizzled_offset<kRow / 16>(unit / (kRow / 16), unit % (kRow / 16));
      dev::cp_async_16(dst_k + dst, src_k + u * 16, true);
      dev::cp_async_16(dst_v + dst, src_v + u * 16, true);
    }
  }

  // Issues the copies of tokens [t0, t0 + BN) of K and V into a stage; groups of 4 rows at or past
  // len are zero-filled (a group straddling len is copied whole; its extra rows are masked / zeroed).
  static __device__ __forceinline__ void load_chunk(const DecodeParams& p, u32 dst_k, u32 dst_v, int b, int h,
                                                    int t0, int len, int lane) {
    // The common case: every token valid and on one page (always so for a contiguous cache), so the
    // chunk is one contiguous byte range in each cache.
    if (t0 + BN <= len && (!PAGED || t0 / p.page_size == (t0 + BN - 1) / p.page_size)) {
      long long ok, ov;
      row_offsets(p, b, h, t0, ok, ov);
      copy_run(p, dst_k, dst_v, ok, ov, 0, kUnits, lane);
      return;
    }
    // Paged, every token valid, pages of a size dividing the chunk: one contiguous run per page.
    if (PAGED && t0 + BN <= len && BN % p.page_size == 0) {
      // The chunk's page ids in one round of loads (lane i: page i; at most BN / 4 <= 16 pages), not one
      // dependent table load per page.
      const int pages = BN / p.page_size;
      const int run_units = p.page_size * kRow / 16;   // a page's rows: a multiple of 4 rows, of 16 bytes
      const int my_page =
          lane < pages ? p.block_table[(long long)b * p.table_stride + t0 / p.page_size + lane] : 0;
      for (int i = 0; i < pages; ++i) {
        long long ok, ov;
        slot_offsets(p, __shfl_sync(0xffffffffu, my_page, i), h, 0, ok, ov);
        copy_run(p, dst_k, dst_v, ok, ov, i * run_units, run_units, lane);
      }
      return;
    }
#pragma unroll 4
    for (int u = lane; u < kUnits; u += 32) {
      const int byte = u * 16;
      const int group = byte / (4 * kRow);
      const int within = byte - group * 4 * kRow;
      const int t = t0 + 4 * group;
      const bool valid = t < len;
      long long ok = 0, ov = 0;
      if (valid) row_offsets(p, b, h, t, ok, ov);
      u32 dst = byte;
      if constexpr (SWIZZLE) dst = dev::swizzled_offset<kRow / 16>(byte / kRow, (byte % kRow) / 16);
      dev::cp_async_16(dst_k + dst, p.k.ptr + ok + (valid ? within : 0), valid);
      dev::cp_async_16(dst_v + dst, p.v.ptr + ov + (valid ? within : 0), valid);
    }
  }
};

}  // namespace qattn::decode

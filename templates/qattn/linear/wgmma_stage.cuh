// The shared-memory side of the wgmma GEMM (gemm_wgmma.cuh): the cp.async stages, and for int8 / int4
// weights the conversion of a stage's codes into a 16-bit W tile that wgmma reads.
//
// wgmma reads K-major 16-bit operands with the 128-byte swizzle: 64-element rows, 8-row atoms of 1024
// bytes, 16-byte chunk c of row r at chunk c ^ (r % 8) — dev::swizzled_offset<8>, provided every tile
// starts on a 1024-byte boundary (stages are wg_stage_bytes apart from an aligned base). A k tile wider
// than 64 (int4: 128) is kept as column blocks of 64 k, each [rows][64], one swizzle-atom column each.
//
// Stage layout (the regions of stage_bytes, linear_shape.h):
//   W     16-bit: [BN][64] elements, 128-byte swizzle (read by wgmma as is);
//         int8 / int4: [BN][64 bytes] codes, dev::swizzled_offset<4> (read only by dequantize());
//   A     [BK / 64 blocks][BM][64] elements, 128-byte swizzle;
//   int4  (scale, zero) float pairs of the tile's BN rows (one group per k tile).
// For 16-bit and int8 weights this is the mma.sync StageLoader's layout; int4 changes the A tile only.
//
// Dequantized W (int8 / int4; two buffers after the stages): [BK / 64 blocks][BN][64] of A's type,
// 128-byte swizzle. Codes keep their k order (wgmma reads the tile as a plain matrix, unlike the
// permuted mma.sync fragments of weight_tile.cuh): int8 codes exact, the per-channel scale applied in
// the epilogue; int4 (code - zero) · scale rounded once to A's type, as in the mma.sync form.
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"
#include "qattn/linear/linear_shape.h"
#include "qattn/linear/stage_loader.cuh"
#include "qattn/linear/weight_tile.cuh"

namespace qattn::linear {

template <Fmt A, Fmt W, int K, int BM, int BN, int THREADS>
struct WgmmaStage : StageLoader<Dataflow::gemm, W, K, BM, BN, THREADS> {
  using Base = StageLoader<Dataflow::gemm, W, K, BM, BN, THREADS>;
  using Base::Base;
  using Base::kBK;
  using Base::kWOffset;
  using Base::kAOffset;
  using Base::kSzOffset;

  static constexpr int kKBlocks = kBK / 64;                 // 64-k column blocks of A and dequantized W
  static constexpr int kABlockBytes = BM * 128;
  static constexpr int kWBlockBytes = BN * 128;             // of a 16-bit W tile
  static constexpr int kStageBytes = wg_stage_bytes(W, BM, BN);
  static constexpr int kDequantBytes = BN * kBK * 2;        // one dequantized W tile
  static_assert(kAOffset % kWgmmaAlignBytes == 0 && kStageBytes % kWgmmaAlignBytes == 0 &&
                    kDequantBytes % kWgmmaAlignBytes == 0 && kABlockBytes % kWgmmaAlignBytes == 0,
                "linear wgmma: operand tiles must start on 1024-byte boundaries");
  static_assert(2 * kDequantBytes == wg_dequant_bytes(W, BN) || is_16bit(W), "linear wgmma: dequant buffers");

  // Issues the copies of tile t into the stage at shared address st (no commit).
  __device__ __forceinline__ void load(u32 st, int t, const LinearParams& p, int tid) const {
    if constexpr (W != Fmt::int4) {
      Base::load(st, t, p, tid);   // one 64-k block: the mma.sync layout is wgmma's
    } else {
      const int kt = t * kBK;
      const int left = this->k_len - kt;   // a multiple of 128
      const int w_chunks = min(Base::kWChunks, left / Base::kCodesPerChunk);
      load_tile<BN, Base::kWChunks, THREADS>(st + kWOffset, this->w_split + kt / 2, this->ldw_bytes, this->w_rows,
                                             w_chunks, p.w, tid);
      const int a_chunks = min(8 * kKBlocks, left / 8);
#pragma unroll
      for (int b = 0; b < kKBlocks; ++b)
        load_tile<BM, 8, THREADS>(st + kAOffset + b * kABlockBytes, this->a_split + (long long)(kt + 64 * b) * 2,
                                  this->lda_bytes, this->a_rows, max(0, a_chunks - 8 * b), p.a, tid);
      load_scales<BN, Base::kGroups, THREADS, K>(st + kSzOffset, p, this->n0, p.n, (this->k0 + kt) / kLinearInt4Group,
                                                 this->k_end / kLinearInt4Group, tid);
    }
  }

  // int8 / int4: the codes of the stage at st into the 16-bit W tile at dst (all threads, after the
  // barrier that follows the tile's arrival; the caller fences and synchronizes before wgmma reads it).
  // Thread i takes code chunk (row i % BN, chunk i / BN): 8 consecutive rows per 8-lane phase keep both
  // the code reads (swizzle<4>) and the 16-byte stores (swizzle<8>) free of bank conflicts. Two chunks
  // at a time: fully unrolled, int4 with 128 accumulators per thread (4 warps) spills.
  static __device__ __forceinline__ void dequantize(u32 st, u32 dst, int tid) {
    static_assert(!is_16bit(W), "linear wgmma: only quantized W is dequantized");
    constexpr int kChunks = BN * Base::kWChunks;                // code chunks of the tile
    constexpr int kOut = Base::kCodesPerChunk / 8;              // 16-byte output chunks per code chunk
    static_assert(kChunks % THREADS == 0, "linear wgmma: whole code chunks per thread");
#pragma unroll 2
    for (int it = 0; it < kChunks / THREADS; ++it) {
      const int i = tid + it * THREADS, n = i % BN, c = i / BN;
      const dev::U32x4 v = dev::ld_shared_16(st + kWOffset + dev::swizzled_offset<Base::kWChunks>(n, c));
      const u32 w[4] = {v.x, v.y, v.z, v.w};
      u32 q[4 * kOut];   // the output chunks' words, k order
      if constexpr (W == Fmt::int8) {
#pragma unroll
        for (int j = 0; j < 4; ++j) int8x4_to_pairs<A>(w[j], q[2 * j], q[2 * j + 1]);
      } else {
        const dev::U32x2 sz = ld_shared_8(st + kSzOffset + n * 8);
        const float scale = __uint_as_float(sz.x), shift = int4_shift(scale, __uint_as_float(sz.y));
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          int4x4_to_pairs<A, 0>(w[j], scale, shift, q[4 * j], q[4 * j + 1]);
          int4x4_to_pairs<A, 2>(w[j], scale, shift, q[4 * j + 2], q[4 * j + 3]);
        }
      }
#pragma unroll
      for (int e = 0; e < kOut; ++e) {
        const int k8 = c * kOut + e;   // the output chunk's 8-element k group in the tile
        const u32 at = dst + (k8 / 8) * kWBlockBytes + dev::swizzled_offset<8>(n, k8 % 8);
        dev::st_shared_16(at, dev::U32x4{q[4 * e], q[4 * e + 1], q[4 * e + 2], q[4 * e + 3]});
      }
    }
  }
};

}  // namespace qattn::linear

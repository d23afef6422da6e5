// The wgmma form of the tiled GEMM (sm_90a; Gemm<..., WGMMA = true>, tiling token _wg).
//
// A CTA of WARPS / 4 warpgroups computes a BM x BN tile of C. The tokens are wgmma's M side: each
// warpgroup owns wg_slabs() 64-row slabs of A; the W rows (channels) are the N side, wg_n() of them per
// product (BN, or BN / 2 when two warpgroups share the one slab of bm 64). Both operands come from
// shared memory (descriptors), K-major, 128-byte swizzle (wgmma_stage.cuh); K advances by k16 steps.
//
// The k loop (one cp.async ring of STAGES tiles, every thread a consumer and a loader):
//   wait for tile t's copies; fence.proxy.async (this thread's cp.async writes, seen by wgmma); barrier
//   load tile t + kAhead into the stage of tile t - 1 - kLag, which no wgmma reads any more
//   int8 / int4: dequantize tile t into buffer t % 2; fence.proxy.async; barrier
//   wgmma over the tile, commit; wait until at most kLag groups are pending.
// kLag = 1 from 3 stages on: tile t's products run while the warps come around for tile t + 1 (its
// barrier, its loads and, for quantized W, its conversion into the other buffer). Every warpgroup has
// waited for tile t - 1 - kLag before the barrier of tile t, so the stage and the buffer rewritten after
// that barrier are free.
//
// Epilogue: accumulator fragments (wgmma_f16.cuh) as (row, column) pairs into split_k_epilogue.cuh.
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"
#include "qattn/common/wgmma.cuh"
#include "qattn/linear/linear_shape.h"
#include "qattn/linear/split_k_epilogue.cuh"
#include "qattn/linear/wgmma_f16.cuh"
#include "qattn/linear/wgmma_stage.cuh"

namespace qattn::linear {

template <Fmt A, Fmt W, Fmt OUT, int N, int K, bool BIAS, int BM, int BN, int WARPS, int STAGES>
struct GemmWgmma {
  static_assert(linear_tiling_problem(Dataflow::gemm, A, W, BM, BN, WARPS, STAGES, true) == nullptr,
                "linear gemm wgmma: unsupported formats or tiling (linear_shape.h)");
  static_assert(K % (128 / weight_bits(W)) == 0 && (W != Fmt::int4 || K % kLinearInt4Group == 0),
                "linear gemm: K must be a multiple of 8 (16-bit W), 16 (int8) or 128 (int4)");

  static constexpr int kThreads = WARPS * 32;

 private:
  using u32 = dev::u32;
  using u64 = dev::u64;
  using Stage = WgmmaStage<A, W, K, BM, BN, kThreads>;
  using Epi = Epilogue<W, OUT, BIAS>;

  static constexpr bool kDequant = !is_16bit(W);
  static constexpr int kGroups = WARPS / 4;                  // warpgroups
  static constexpr int kSlabs = wg_slabs(BM, WARPS);          // 64-row slabs per warpgroup
  static constexpr int kN = wg_n(BM, BN, WARPS);              // channels per warpgroup (the wgmma n)
  static constexpr bool kSplitN = kN < BN;                    // two warpgroups on one slab
  static constexpr int kSteps = Stage::kBK / 16;              // k16 products per tile and slab
  static constexpr int kLag = STAGES >= 3 ? 1 : 0;            // wgmma groups left pending per tile
  static constexpr int kAhead = STAGES - 1 - kLag;            // tiles in flight
  static_assert(kSlabs * 64 * (kSplitN ? 1 : kGroups) == BM && kN * (kSplitN ? kGroups : 1) == BN,
                "linear wgmma: the warpgroups must cover the tile once");

  using Acc = float[kSlabs][kN / 8][4];

  // The products of one tile: a_tile / w_tile the first 64-k block of A (this warpgroup's first slab)
  // and of W (its first channel), 16-bit, 128-byte swizzle. Offsets inside a descriptor are in 16 bytes.
  static __device__ __forceinline__ void multiply(Acc& acc, u32 a_tile, u32 w_tile, int w_block_bytes) {
    const u64 ad = dev::wgmma_desc(a_tile, 128), wd = dev::wgmma_desc(w_tile, 128);
    dev::wgmma_fence();
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int block = s / 4, in_row = (s % 4) * 32;   // 16 elements = 32 bytes along a 128-byte row
#pragma unroll
      for (int sl = 0; sl < kSlabs; ++sl)
        wgmma_f16_ss<kN, A>(acc[sl], ad + u64((block * Stage::kABlockBytes + sl * 64 * 128 + in_row) >> 4),
                            wd + u64((block * w_block_bytes + in_row) >> 4));
    }
    dev::wgmma_commit();
  }

 public:
  static __device__ void run(const LinearParams& p, char* smem) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, group = warp >> 2;
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
    int k0, k_end;
    split_range<K>(p, k0, k_end);
    const Stage ld(p, n0, m0, k0, k_end);
    u32 sbase = dev::smem_addr(smem);
    sbase += (kWgmmaAlignBytes - (sbase & (kWgmmaAlignBytes - 1))) & (kWgmmaAlignBytes - 1);   // the slack
    const u32 dequant_base = sbase + STAGES * Stage::kStageBytes;
    // This warpgroup's first row of the tile and first channel.
    const int row0 = kSplitN ? 0 : group * kSlabs * 64, col0 = kSplitN ? group * kN : 0;

    Acc acc;
#pragma unroll
    for (int sl = 0; sl < kSlabs; ++sl)
#pragma unroll
      for (int j = 0; j < kN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[sl][j][e] = 0.f;

    const int tiles = ld.tiles();
#pragma unroll
    for (int s = 0; s < kAhead; ++s) {
      if (s < tiles) ld.load(sbase + s * Stage::kStageBytes, s, p, tid);
      dev::cp_async_commit();   // empty groups keep the count of the wait below right
    }
#pragma unroll 1
    for (int t = 0; t < tiles; ++t) {
      dev::cp_async_wait<kAhead - 1>();
      if constexpr (!kDequant) dev::fence_proxy_async();   // this thread's cp.async writes, seen by wgmma
      __syncthreads();
      const int next = t + kAhead;
      if (next < tiles) ld.load(sbase + (next % STAGES) * Stage::kStageBytes, next, p, tid);
      dev::cp_async_commit();
      const u32 st = sbase + (t % STAGES) * Stage::kStageBytes;
      u32 w_tile = st + Stage::kWOffset;
      if constexpr (kDequant) {
        w_tile = dequant_base + (t & 1) * Stage::kDequantBytes;
        Stage::dequantize(st, w_tile, tid);
        dev::fence_proxy_async();   // the 16-bit tile's stores and this thread's A copies, seen by wgmma
        __syncthreads();
      }
      multiply(acc, st + Stage::kAOffset + row0 * 128, w_tile + col0 * 128, kDequant ? BN * 128 : 0);
      dev::wgmma_wait<kLag>();
    }
    dev::wgmma_wait<0>();
#pragma unroll
    for (int sl = 0; sl < kSlabs; ++sl) dev::fence_operands(acc[sl]);
    dev::cp_async_wait<0>();

    // Fragment (lane 4g + t of warp w of the group): d[j][0..1] row 16w + g, columns 8j + 2t (+1);
    // d[j][2..3] row 16w + g + 8.
    const int g = lane >> 2, t4 = lane & 3, wrow = 16 * (warp & 3);
#pragma unroll
    for (int sl = 0; sl < kSlabs; ++sl)
#pragma unroll
      for (int j = 0; j < kN / 8; ++j) {
        const int m = m0 + row0 + 64 * sl + wrow + g, n = n0 + col0 + 8 * j + 2 * t4;
        Epi::put2(p, m, n, acc[sl][j][0], acc[sl][j][1]);
        Epi::put2(p, m + 8, n, acc[sl][j][2], acc[sl][j][3]);
      }
    Epi::template reduce_splits<BM, BN, kThreads>(p, m0, n0);
  }
};

}  // namespace qattn::linear

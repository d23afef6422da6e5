// The cp.async stages of the tensor-core linear kernels (flat_gemm.cuh, gemm.cuh). Stage layout
// (linear_shape.h): the W tile (BN rows of w_row_bytes), the A tile (BM rows of BK 16-bit elements),
// then for int4 the (scale, zero) float pairs [row][group] of the tile's groups. Both tiles are
// swizzled in 16-byte chunks (dev::swizzled_offset), so ldmatrix and the per-thread activation loads
// read them without bank conflicts.
//
// The CTA's K range is [k0, k_end) (its split); tile t covers k0 + t * BK .. + BK. Chunks at or past
// k_end, rows past N (W) or M (A) are zero-filled: zeros in every product, whatever the format decodes
// them to, because the matching activations are zero too.
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"
#include "qattn/linear/linear_shape.h"
#include "qattn/linear/weight_tile.cuh"

namespace qattn::linear {

// 8 bytes of shared memory (the activation operand next to quantized W).
__device__ __forceinline__ dev::U32x2 ld_shared_8(dev::u32 addr) {
  dev::U32x2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}

template <Dataflow FLOW, Fmt W, int K, int BM, int BN, int THREADS>
struct StageLoader {
  static constexpr int kBK = linear_bk(FLOW, W);
  static constexpr int kBits = weight_bits(W);
  static constexpr int kWChunks = w_row_bytes(FLOW, W) / 16;   // 16-byte chunks per W row
  static constexpr int kAChunks = kBK / 8;                     // ... per A row
  static constexpr int kCodesPerChunk = 128 / kBits;
  static constexpr int kGroups = groups_per_tile(FLOW, W);
  static constexpr int kWOffset = 0;
  static constexpr int kAOffset = w_tile_bytes(FLOW, W, BN);
  static constexpr int kSzOffset = kAOffset + a_tile_bytes(FLOW, W, BM);
  static constexpr int kStageBytes = stage_bytes(FLOW, W, BM, BN);
  static_assert(kAOffset % 128 == 0 && kSzOffset % 128 == 0 && kStageBytes % 128 == 0,
                "linear: stage regions must stay 128-byte aligned");

  const char* w_split;   // W row n0, element k0
  const char* a_split;   // A row m0, element k0
  long long ldw_bytes, lda_bytes;
  int w_rows, a_rows;    // rows of the tiles that exist (<= BN, BM)
  int k_len;             // k_end - k0
  int n0, k0, k_end;

  __device__ __forceinline__ StageLoader(const LinearParams& p, int n0_, int m0, int k0_, int k_end_)
      : n0(n0_), k0(k0_), k_end(k_end_) {
    ldw_bytes = kBits == 16 ? p.ldw * 2 : p.ldw;
    lda_bytes = p.lda * 2;
    w_split = static_cast<const char*>(p.w) + (long long)n0 * ldw_bytes + (long long)k0 * kBits / 8;
    a_split = static_cast<const char*>(p.a) + (long long)m0 * lda_bytes + (long long)k0 * 2;
    w_rows = min(BN, p.n - n0);
    a_rows = min(BM, p.m - m0);
    k_len = k_end - k0;
  }

  __device__ __forceinline__ int tiles() const { return k_len > 0 ? (k_len + kBK - 1) / kBK : 0; }

  // Issues the copies of tile t into the stage at shared address st (no commit).
  __device__ __forceinline__ void load(u32 st, int t, const LinearParams& p, int tid) const {
    const int kt = t * kBK;
    const int left = k_len - kt;   // a multiple of 8 (16-bit W), 16 (int8) or 128 (int4)
    const int w_chunks = min(kWChunks, left / kCodesPerChunk);
    const int a_chunks = min(kAChunks, left / 8);
    load_tile<BN, kWChunks, THREADS>(st + kWOffset, w_split + (long long)kt * kBits / 8, ldw_bytes, w_rows, w_chunks,
                                     p.w, tid);
    load_tile<BM, kAChunks, THREADS>(st + kAOffset, a_split + (long long)kt * 2, lda_bytes, a_rows, a_chunks, p.a, tid);
    if constexpr (W == Fmt::int4)
      load_scales<BN, kGroups, THREADS, K>(st + kSzOffset, p, n0, p.n, (k0 + kt) / kLinearInt4Group,
                                           k_end / kLinearInt4Group, tid);
  }
};

// The k loop: tile t is computed from stage t % STAGES while tiles t + 1 .. t + STAGES - 1 are in
// flight. One barrier per tile: after it, tile t has landed for every thread and every warp is done
// with tile t - 1, whose stage the next copies overwrite. compute(stage shared address).
template <int STAGES, class Loader, class Compute>
__device__ __forceinline__ void run_pipeline(const Loader& ld, const LinearParams& p, u32 sbase, int tid,
                                             Compute&& compute) {
  static_assert(STAGES >= 2, "linear: the pipeline needs at least 2 stages");
  const int tiles = ld.tiles();
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < tiles) ld.load(sbase + s * Loader::kStageBytes, s, p, tid);
    dev::cp_async_commit();   // empty groups keep the count of wait<STAGES - 2> right
  }
#pragma unroll 1
  for (int t = 0; t < tiles; ++t) {
    dev::cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = t + STAGES - 1;
    if (next < tiles) ld.load(sbase + (next % STAGES) * Loader::kStageBytes, next, p, tid);
    dev::cp_async_commit();
    compute(sbase + (t % STAGES) * Loader::kStageBytes);
  }
  dev::cp_async_wait<0>();
}

}  // namespace qattn::linear

// Q smoothing by block means (smooth=q; SageAttention2 §3.3): the per-channel mean of every block of
// kQMeanBlock (64) query rows of (b, h), subtracted from Q before quantizing. The attention kernel adds
// the block mean's share of the scores back, q̄_b·k (docs/design/prefill-kernels.md, "Q smoothing").
//
//   BlockMeans<In, D, TileTokens>: the means of the blocks of one row tile (64 or 128 rows) that a
//     quantizer block already holds in registers, so Q is still read once (QuantizeRows<..., BlockMean>).
//     Rows past seq_len hold zeros and count nothing: the mean of a block cut by seq_len is over its
//     existing rows only.
//   BlockMeanAmax<In, D>: per_tensor scales need the abs-max of the smoothed Q over the whole tensor before
//     any code is written; this pass computes each tile's means (the same code as QuantizeRows, so the
//     very same floats) and the abs-max of x - mean into amax_scratch[0] (zeroed before the launch).
//     Grid (ceil(seq_len / 64), heads, batch) x 256.
//   Variable-length input (QuantParams::cu_seqlens): each sequence's own length cuts its blocks; the
//     means keep the layout of seq_len (the longest), and the blocks past a sequence's end hold 0.
#pragma once

#include "qattn/quant/quant_device.cuh"

namespace qattn {
namespace quant {

template <Fmt In, int D, int TileTokens>
struct BlockMeans {
  static constexpr int kLanesPerRow = lanes_per_row(D);
  static constexpr int kRowsPerSweep = kThreads / kLanesPerRow;   // 32, 16 or 8: divides kQMeanBlock
  static constexpr int kSweeps = TileTokens / kRowsPerSweep;
  static constexpr int kBlocks = TileTokens / kQMeanBlock;
  static constexpr int kSweepsPerBlock = kQMeanBlock / kRowsPerSweep;
  static_assert(TileTokens % kQMeanBlock == 0 && kQMeanBlock % kRowsPerSweep == 0, "tile must hold whole mean blocks");
  // Shared memory of compute(): one partial sum per (row of a sweep, channel).
  static constexpr int kPartFloats = kRowsPerSweep * kLanesPerRow * kVecElems;

  // The block of sweep j of a thread's rows.
  static __device__ __forceinline__ constexpr int block_of(int j) { return j / kSweepsPerBlock; }

  // mean[k][i]: channel c0 + i of block k of the tile, for the thread's 8 channels (c0 = its vector).
  // Each thread sums its rows of the block, the partials meet in shared memory, and every thread folds
  // its own channels' column (a broadcast read). Block-wide: every thread must call it.
  static __device__ void compute(const uint4 (&raw)[kSweeps], int tile, int seq_len, float (&mean)[kBlocks][kVecElems],
                                 float* part) {
    const int row = threadIdx.x / kLanesPerRow, c0 = (threadIdx.x % kLanesPerRow) * kVecElems;
#pragma unroll
    for (int k = 0; k < kBlocks; ++k) {
      float sum[kVecElems];
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) sum[i] = 0.f;
#pragma unroll
      for (int j = k * kSweepsPerBlock; j < (k + 1) * kSweepsPerBlock; ++j) {
        const Vec8 x = unpack8<In>(raw[j]);   // zeros past seq_len (and on idle lanes)
#pragma unroll
        for (int i = 0; i < kVecElems; ++i) sum[i] += x.v[i];
      }
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) part[row * kLanesPerRow * kVecElems + c0 + i] = sum[i];
      __syncthreads();
      const int first = tile * TileTokens + k * kQMeanBlock;
      const int rows = seq_len - first < kQMeanBlock ? seq_len - first : kQMeanBlock;
      const float inv = rows > 0 ? 1.f / static_cast<float>(rows) : 0.f;
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) {
        float t = 0.f;
        for (int r = 0; r < kRowsPerSweep; ++r) t += part[r * kLanesPerRow * kVecElems + c0 + i];
        mean[k][i] = t * inv;
      }
      __syncthreads();   // part is reused by the next block
    }
  }

  // Writes the tile's means to QuantParams::mean ([b, h, ceil(seq_len / 64), d]): the first row's lanes.
  static __device__ void store(const QuantParams& p, int b, int h, int tile, const float (&mean)[kBlocks][kVecElems]) {
    const int vec = threadIdx.x % kLanesPerRow;
    if (threadIdx.x >= kLanesPerRow || vec * kVecElems >= D) return;
    const int n_blocks = (p.seq_len + kQMeanBlock - 1) / kQMeanBlock;
#pragma unroll
    for (int k = 0; k < kBlocks; ++k) {
      const int blk = tile * kBlocks + k;
      if (blk >= n_blocks) continue;
      float4* dst = reinterpret_cast<float4*>(p.mean + ((static_cast<long long>(b) * p.heads + h) * n_blocks + blk) * D +
                                              vec * kVecElems);
      dst[0] = make_float4(mean[k][0], mean[k][1], mean[k][2], mean[k][3]);
      dst[1] = make_float4(mean[k][4], mean[k][5], mean[k][6], mean[k][7]);
    }
  }
};

template <Fmt In, int D>
struct BlockMeanAmax {
  static_assert(supported_head_dim(D), "head dim must be 64, 96, 128 or 256");
  static constexpr int kThreads = quant::kThreads;
  using Means = BlockMeans<In, D, kRowTileTokens>;

  static __device__ void run(const QuantParams& p) {
    __shared__ float part[Means::kPartFloats];
    __shared__ float red[kThreads / 32];
    const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int vec = threadIdx.x % Means::kLanesPerRow, c0 = vec * kVecElems;
    const bool active = c0 < D;
    const int s_first = tile * kRowTileTokens + static_cast<int>(threadIdx.x) / Means::kLanesPerRow;
    const InputRows rows = input_rows(p, b, h);
    const int len = rows.len;   // this sequence's tokens (seq_len when dense)
    uint4 raw[Means::kSweeps];
#pragma unroll
    for (int j = 0; j < Means::kSweeps; ++j) {
      const int s = s_first + j * Means::kRowsPerSweep;
      raw[j] = s < len && active ? load16(rows.at(s, c0))
                                       : make_uint4(0u, 0u, 0u, 0u);
    }
    float mean[Means::kBlocks][kVecElems];
    Means::compute(raw, tile, len, mean, part);
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < Means::kSweeps; ++j) {
      if (s_first + j * Means::kRowsPerSweep >= len || !active) continue;
      const Vec8 x = unpack8<In>(raw[j]);
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) amax = fmaxf(amax, fabsf(x.v[i] - mean[Means::block_of(j)][i]));
    }
    amax = block_max<kThreads>(amax, red);
    if (threadIdx.x == 0) atomic_max_nonneg(p.amax_scratch, amax);
  }
};

}  // namespace quant
}  // namespace qattn

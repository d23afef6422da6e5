// Reduction passes: the one extra read of the input that whole-tensor or whole-head quantities need.
//   TensorAmax:   abs-max of the whole tensor into amax_scratch[0] (per_tensor without smoothing).
//   ChannelStats: per-channel sum (and, with MinMax, max and min) of each chunk of kStatsChunkTokens
//                 tokens of (b, h), written to the scratch statistics; FinalizeStats turns them into
//                 means and scales. Smoothing per_token/per_block needs only the sums: without MinMax
//                 a thread holds 8 accumulators instead of 24 and keeps twice as many loads in flight.
//                 SampleTokens > 0 (K smoothing with token-local scales, sums only): the chunks are of
//                 the strided sample of stats_tokens(seq_len, SampleTokens) tokens (sampled_token,
//                 quant_config.h) instead of the whole head, so the pass reads a fixed number of rows,
//                 in chunks of kSampledChunkTokens (64) so that there are enough blocks.
// Grid of both: (stats_splits(tokens read: seq_len, or the sample's; chunk), heads, batch); one block
// reads one chunk of one head.
// Variable-length input (QuantParams::cu_seqlens, quant_device.cuh's InputRows): the grid and the
// scratch layout stay those of seq_len (the longest sequence); each head reads its sequence's own
// tokens (a sample is over its own length: stats_tokens(len_b, S)), and the chunks past them hold the
// empty statistics (sum 0, max -inf, min +inf), so FinalizeStats folds the same values as for that
// sequence alone.
#pragma once

#include "qattn/quant/head_sync.cuh"

namespace qattn {
namespace quant {

// Rows of a chunk as tokens of the head: every token, or the strided sample (sampled_token).
struct EveryToken {
  __device__ __forceinline__ int operator()(int row) const { return row; }
};
struct SampledToken {
  int seq_len, tokens;   // tokens = stats_tokens(seq_len, sample)
  __device__ __forceinline__ int operator()(int row) const { return sampled_token(row, seq_len, tokens); }
};

// Calls f(Vec8) for this thread's vectors of rows [s_begin, s_end) of (b, h), row s being token
// token_of(s). Several loads are issued before any is consumed, so each thread keeps kUnroll 16-byte
// requests in flight.
template <Fmt In, int D, int kUnroll, class F, class TokenOf = EveryToken>
__device__ __forceinline__ void for_each_chunk_vector(const InputRows& x, int s_begin, int s_end, F&& f,
                                                      TokenOf token_of = {}) {
  constexpr int kVecPerRow = D / kVecElems;
  constexpr int kLanesPerRow = lanes_per_row(D);   // > kVecPerRow at d = 96 only: those lanes read nothing
  constexpr int kRowsPerSweep = kThreads / kLanesPerRow;
  const int vec = threadIdx.x % kLanesPerRow;
  if (kLanesPerRow != kVecPerRow && vec >= kVecPerRow) return;
  for (int s = s_begin + static_cast<int>(threadIdx.x) / kLanesPerRow; s < s_end;
       s += kRowsPerSweep * kUnroll) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int su = s + u * kRowsPerSweep;
      if (su < s_end) raw[u] = load16(x.at(token_of(su), vec * kVecElems));
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (s + u * kRowsPerSweep < s_end) f(unpack8<In>(raw[u]));
    }
  }
}

template <Fmt In, int D>
struct TensorAmax {
  static_assert(supported_head_dim(D), "head dim must be 64, 128 or 256");
  static constexpr int kThreads = quant::kThreads;

  static __device__ void run(const QuantParams& p) {
    __shared__ float red[kThreads / 32];
    const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const InputRows rows = input_rows(p, b, h);
    const int s_begin = split * kStatsChunkTokens;
    const int s_end = min(rows.len, s_begin + kStatsChunkTokens);
    float amax = 0.f;
    for_each_chunk_vector<In, D, 4>(rows, s_begin, s_end, [&](const Vec8& x) {
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) amax = fmaxf(amax, fabsf(x.v[i]));
    });
    amax = block_max<kThreads>(amax, red);
    if (threadIdx.x == 0) atomic_max_nonneg(p.amax_scratch, amax);
  }
};

template <Fmt In, int D, bool MinMax, int SampleTokens = 0>
struct ChannelStats {
  static_assert(supported_head_dim(D), "head dim must be 64, 128 or 256");
  static_assert(SampleTokens >= 0, "SampleTokens: 0 (every token) or the sample size");
  static_assert(SampleTokens == 0 || !MinMax,
                "a sample serves the smoothing mean only: its max and min would miss the tokens it skips");
  static constexpr int kThreads = quant::kThreads;
  static constexpr int kUnroll = MinMax ? 4 : 8;
  using Partials = ChannelPartials<In, D, MinMax>;

  static __device__ void run(const QuantParams& p) {
    __shared__ float part[Partials::kSmemFloats];   // 8 or 24 KiB
    const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const InputRows rows = input_rows(p, b, h);
    const int tokens = stats_tokens(rows.len, SampleTokens);   // rows this head reads
    constexpr int kChunk = stats_chunk_tokens(SampleTokens);
    const int s_begin = split * kChunk;
    const int s_end = min(tokens, s_begin + kChunk);
    Partials acc;
    const auto add = [&](const Vec8& x) { acc.add(x); };
    if constexpr (SampleTokens > 0) {
      for_each_chunk_vector<In, D, kUnroll>(rows, s_begin, s_end, add, SampledToken{rows.len, tokens});
    } else {
      for_each_chunk_vector<In, D, kUnroll>(rows, s_begin, s_end, add);
    }
    // The layout of the chunks is seq_len's (the grid's), whatever this sequence's length.
    const int splits = stats_splits(stats_tokens(p.seq_len, SampleTokens), kChunk);
    float* out = stats_base(p) + stats_index(p, b, h, split, splits, D);
    acc.fold(part, [&](int c, float sum, float hi, float lo) {
      out[c] = sum;
      if (MinMax) {
        out[D + c] = hi;
        out[2 * D + c] = lo;
      }
    });
  }
};

}  // namespace quant
}  // namespace qattn

// Constants shared by the quantization passes (device) and their launch plan (generator/quant_plan.hpp, host).
// Plain C++ so both sides include the very same numbers: a grid the host computes always matches the
// tile the device assumes.
#pragma once

#include "qattn/abi.h"

#if defined(__CUDACC__)
#define QATTN_QUANT_HD __host__ __device__
#else
#define QATTN_QUANT_HD
#endif

namespace qattn {
namespace quant {

// Every tensor-reading pass runs 256 threads; each thread owns one 16-byte vector (8 channels) per row.
constexpr int kThreads = 256;
constexpr int kVecElems = 8;

// Tokens per block of the row quantizer when the scale group does not fix it (per_token, per_tensor,
// per_channel). per_block uses its group size (64 or 128) so one block owns one whole scale group.
constexpr int kRowTileTokens = 64;

// Tokens per block of the transposing V quantizer: one padded V tile, so no block straddles seq_pad.
constexpr int kTransposeTileTokens = kVPadTokens;

// Tokens per block of the statistics pass; the partial sums/max/min of each such chunk go to scratch.
constexpr int kStatsChunkTokens = 512;

// Layout of QuantParams::amax_scratch (floats):
//   [0]                        global abs-max for per_tensor (atomicMax target; zeroed by the caller)
//   [kStatsOffset + ...]       per-chunk channel statistics [batch][heads][split][sum|max|min][d]
constexpr int kStatsOffset = 4;   // keeps the statistics 16-byte aligned

// One-pass plans (head_sync.cuh): a head's statistics live in sync_head_words(d) 32-bit words at
// kSyncOffset + (b*heads + h) * sync_head_words(d), after the ticket in word 0; the whole region is
// zeroed before the launch. Their blocks are launched with at least kOnePassMinBlocks per SM resident.
constexpr int kSyncOffset = 4;
constexpr int kOnePassMinBlocks = 2;
QATTN_QUANT_HD constexpr int sync_head_words(int d) { return 4 + 4 * d; }

// Tokens per block of a sampled statistics pass (SampleTokens > 0, below): a sample is a few rows per
// head, and 512-token chunks left 2 blocks per head for S = 1024 (32 blocks for 16 heads, each reading
// its rows one after another); 64-token chunks give 16 per head, enough to keep loads in flight.
constexpr int kSampledChunkTokens = 64;
QATTN_QUANT_HD constexpr int stats_chunk_tokens(int sample) { return sample > 0 ? kSampledChunkTokens : kStatsChunkTokens; }

// Blocks (chunks) of a statistics pass over `tokens` tokens per head.
QATTN_QUANT_HD constexpr int stats_splits(int tokens, int chunk = kStatsChunkTokens) {
  return tokens <= chunk ? 1 : (tokens + chunk - 1) / chunk;
}

// Smoothing mean from a sample (K with token-local scales, QuantProblem::mean_sample_tokens): the
// statistics visit `sample` tokens of each head when 0 < sample < seq_len, else every token. Any
// per-channel vector subtracted from K cancels in softmax, so the sample's mean serves as well as the
// exact one, and the statistics pass reads a fixed number of rows instead of the whole head.
QATTN_QUANT_HD constexpr int stats_tokens(int seq_len, int sample) {
  return sample > 0 && sample < seq_len ? sample : seq_len;
}
// Scales computed from each row's (or row group's) own values: the granularities whose smoothing mean
// may come from a sample (stats_tokens); per_tensor and per_channel need statistics of every token.
QATTN_QUANT_HD constexpr bool token_local_gran(Gran g) {
  return g == Gran::per_token || g == Gran::per_block || g == Gran::per_warp || g == Gran::per_thread;
}
// Token of sample i < tokens (= stats_tokens(seq_len, sample)): the middle token of the i-th of `tokens`
// equal strides of the sequence, so the sample spreads over the whole head and takes the first token
// (often an outlier in LLM keys: the attention sink) only when a stride is shorter than 2 tokens. Every
// token, in order, when tokens == seq_len; distinct tokens otherwise (the stride is above 1).
QATTN_QUANT_HD constexpr int sampled_token(int i, int seq_len, int tokens) {
  return static_cast<int>((2LL * i + 1) * seq_len / (2LL * tokens));
}

// Hadamard rotation of Q and K (spec option rotate=hadamard): each row's channels, in blocks of
// rotation_block(d) (the largest power of two dividing d: 64, 32, 128, 256), go through x -> H · S · x
// with H the Sylvester Hadamard matrix (entries +-1) and S a fixed diagonal of signs. H·S is orthogonal
// up to the factor B, so Q takes it unnormalized and K divided by B (a power of two, exact):
// (H S q) · (H S k) / B = q · k. A channel with a large variance (which no mean subtraction removes)
// is spread over the B channels of its block, so one outlier channel no longer sets every row's scale.
// The signs keep structured inputs (a row that is itself a Hadamard row) from concentrating again.
QATTN_QUANT_HD constexpr int rotation_block(int d) { return d % 256 == 0 ? 256 : d % 128 == 0 ? 128 : d % 64 == 0 ? 64 : 32; }
// QuantizeRows' Rotate (QuantRequest::rotate): which side of the product a pass rotates.
constexpr int kRotateNone = 0;
constexpr int kRotateQ = 1;   // H S x
constexpr int kRotateK = 2;   // H S x / B
// true: channel c (of its block) is negated before the transform. A fixed pseudo-random pattern: bit 0
// of murmur3's finalizer of c. (A constant row through S then H stays spread: max |H S 1| / sqrt(B) is
// 2.1-2.9 for B = 32-256, where a periodic pattern can be a Walsh function and collapse to one channel.)
QATTN_QUANT_HD constexpr bool rotation_negates(int c) {
  unsigned x = static_cast<unsigned>(c) * 0x9E3779B9u + 0x7F4A7C15u;
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return x & 1u;
}

// The rotation of one row of d channels in place, channel by channel (the CPU references' form; the
// kernels spread a row over lanes, rotation.cuh, with the same butterflies in the same order): per block
// of rotation_block(d) channels the signs, the butterflies of distance 1, 2, 4 .. B / 2 (lower channel
// a + b, upper a - b), and for kRotateK the factor 1 / B.
template <class T>
QATTN_QUANT_HD inline void rotate_row_reference(T* v, int d, int rotate) {
  const int block = rotation_block(d);
  for (int c0 = 0; c0 < d; c0 += block) {
    T* x = v + c0;
    for (int c = 0; c < block; ++c)
      if (rotation_negates(c)) x[c] = -x[c];
    for (int h = 1; h < block; h *= 2)
      for (int i = 0; i < block; ++i)
        if (!(i & h)) {
          const T a = x[i], b = x[i + h];
          x[i] = a + b;
          x[i + h] = a - b;
        }
    if (rotate == kRotateK)
      for (int c = 0; c < block; ++c) x[c] *= T(1) / T(block);
  }
}

// Head dimensions the passes are written for: a row is 8, 12, 16 or 32 vectors of 16 bytes.
QATTN_QUANT_HD constexpr bool supported_head_dim(int d) { return d == 64 || d == 96 || d == 128 || d == 256; }

// Lanes that share a row: its vectors rounded up to a power of two, so that a row's lanes are an
// aligned group of one warp (its reductions are shuffles) and 256 threads are a whole number of rows.
// At d = 96 the last 4 of every 16 lanes idle (they load and store nothing): the passes are bound by
// memory bandwidth, which 3/4 of the lanes with whole 16-byte vectors still saturate.
QATTN_QUANT_HD constexpr int lanes_per_row(int d) { return d <= 64 ? 8 : (d <= 128 ? 16 : 32); }

}  // namespace quant
}  // namespace qattn

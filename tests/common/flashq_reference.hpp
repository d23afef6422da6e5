// Host model of the FlashQ KV cache (TurboAttention; the byte layout of the flashq paragraph of
// templates/qattn/decode/kv_layout.h) and the float64 decode reference over it.
//
// The quantizers repeat the device's operations (templates/qattn/decode/flashq_pack.cuh) in the same
// fp32 steps and integers, so a cache written on the GPU equals the model byte for byte:
//   stage 1   alpha = absmax / 127 (fp32), x8 = rint(x / alpha) clamped to [-127, 127] (0 when alpha = 0)
//   stage 2   per channel over the block's 64 tokens: s_c = max(1, ceil((max - min) / (2^bits - 1))),
//             m_c = min, code = rint((x8 - m_c) / s_c) (half to even), at most 2^bits - 1
//   buffer    int8:per_token rows whose scale is the head's universal scale: q = rint(x / scale), clamped
// and the model's prefill / append / flush touch exactly the bytes the kernels touch (rows past a
// buffer's length keep whatever they held: stale rows of a flush, or the poison of a fresh cache).
// Dequantization is exact in float64: a block element is alpha * (s_c * code + m_c), a buffer element
// scale * q.
//
// For decode tests:
//   HostFlashQCache cache = make_flashq_cache(d, batch, k_bits, v_bits, max_blocks, paged, seed);
//   cache.k_scale8 = ...; cache.v_scale8 = ...;           // or flashq_reference_scales(...)
//   flashq_prefill(cache, k, v, n, lens);  flashq_append(cache, k_new, v_new, n_new);  ...
//   (upload cache.k_blocks, cache.k_buffer.bytes, cache.head_table(), ... or compare them with the GPU's)
//   o = reference_decode_flashq(q, cache, cache.compressed_lens, cache.buffer_lens, heads_q, q_len, causal,
//                               0.0, &lse);
#pragma once
#include <cstdint>
#include <vector>

#include "qattn/decode/kv_layout.h"
#include "tests/common/kv_reference.hpp"

namespace qattn {
namespace test {

// ---- One block of 64 tokens x d channels (token-major float / int8 arrays of 64 * d values).
int flashq_block_bytes(int bits, int d);
// rint(x / scale) clamped to [-127, 127]; 0 for scale 0 (the device's code8).
int flashq_code8(float x, float scale);
// Stage 1: returns alpha and writes the INT8 values.
float flashq_stage1(int d, const float* x, signed char* x8);
// Stage 2: the whole block (alpha, zero pad, s_c, m_c, codes) from INT8 values and alpha.
void flashq_compress_block(int bits, int d, float alpha, const signed char* x8, unsigned char* block);
// Both stages.
void flashq_quantize_block(int bits, int d, const float* x, unsigned char* block);
// Fields of a block.
float flashq_block_alpha(const unsigned char* block);
int flashq_block_step(int d, const unsigned char* block, int c);     // s_c
int flashq_block_min(int d, const unsigned char* block, int c);      // m_c
int flashq_block_code(int bits, int d, const unsigned char* block, int r, int c);
int flashq_block_int8(int bits, int d, const unsigned char* block, int r, int c);   // s_c * code + m_c
void flashq_dequantize_block(int bits, int d, const unsigned char* block, double* out);   // 64 x d

// ---- A buffer row (int8:per_token layout, 4 + d bytes) with the given universal scale.
void flashq_quantize_buffer_row(int d, float scale, const float* x, unsigned char* row);

// ---- Head-wise mixed precision, written independently of the library's (include/qattn/flashq.hpp).
// Per-channel min / max of x [batch][heads][n][d] over every sequence's first lens[b] tokens:
// mins / maxs [heads][d].
void flashq_reference_stats(const std::vector<float>& x, int batch, int heads, int n, int d, const std::vector<int>& lens,
                            std::vector<float>* mins, std::vector<float>* maxs);
// gap_h * sigma_h (population std of the channel gaps), float64.
std::vector<double> flashq_reference_priority(const std::vector<float>& mins, const std::vector<float>& maxs, int heads, int d);
// The n_low (-1: heads / 2) lowest priorities get 2 bits, ties by head index; the others 4.
std::vector<int> flashq_reference_bits(const std::vector<double>& priority, int n_low = -1);
// (absmax > 0 ? absmax : 1) / 127 per head.
std::vector<float> flashq_reference_scales(const std::vector<float>& mins, const std::vector<float>& maxs, int heads, int d);

// ---- The cache: K (which = 0) and V (which = 1), each blocks + an INT8 buffer.
struct HostFlashQCache {
  int d = 0, batch = 0, heads_kv = 0;
  std::vector<int> k_bits, v_bits;
  bool paged = false;
  int max_blocks = 0;                 // blocks per sequence (contiguous pages per sequence; paged table_stride)
  std::vector<int> block_table;       // paged: [batch][max_blocks] page ids
  long long k_page_stride = 0, v_page_stride = 0;
  std::vector<long long> k_head_offset, v_head_offset;
  std::vector<unsigned char> k_blocks, v_blocks;   // batch * max_blocks pages
  HostKvCache k_buffer, v_buffer;     // int8:per_token, contiguous, capacity kv::kFlashQBufferRows
  std::vector<float> k_scale8, v_scale8;   // universal scales [heads_kv]
  std::vector<int> compressed_lens, buffer_lens;   // [batch]

  // DecodeParams::fq_heads: [2][heads_kv][2] = (bits, head offset).
  std::vector<int> head_table() const;
  const std::vector<int>& bits(int which) const { return which == 0 ? k_bits : v_bits; }
};

// Every byte kKvPoison, lengths 0, scales 1/127. Page strides 0 = the sum of the heads' block bytes.
// Paged: the block table is a seeded random permutation of the batch * max_blocks pages.
HostFlashQCache make_flashq_cache(int d, int batch, const std::vector<int>& k_bits, const std::vector<int>& v_bits,
                                  int max_blocks, bool paged, std::uint64_t seed, long long k_page_stride = 0,
                                  long long v_page_stride = 0);
// Byte offset of block j of (b, h) in k_blocks (which 0) or v_blocks (1).
long long flashq_block_offset(const HostFlashQCache& c, int which, int b, int h, int j);

// Fills the (empty) cache with the first lens[b] tokens of k, v [batch][heads_kv][n][d] (fp32 values)
// using the cache's bits and scales; sets the lengths.
void flashq_prefill(HostFlashQCache& c, const std::vector<float>& k, const std::vector<float>& v, int n,
                    const std::vector<int>& lens);
// One decode step, as the device does it: flush when buffer_len >= 64 (and a block is free), then append
// the n_new tokens of k, v [batch][heads_kv][n_new][d].
void flashq_append(HostFlashQCache& c, const std::vector<float>& k, const std::vector<float>& v, int n_new);

// Token t (< compressed_lens[b] + buffer_lens[b]) of (b, h) dequantized, d values.
void flashq_read_token(const HostFlashQCache& c, int which, int b, int h, int t, double* out);

// Float64 decode attention over the dequantized cache: sequence b has compressed_lens[b] tokens in
// blocks, then buffer_lens[b] in the buffer (kv_len = their sum). q, GQA, causal, softmax_scale, lse as
// in reference_decode (kv_reference.hpp): query token i sees t <= kv_len - q_len + i when causal.
std::vector<double> reference_decode_flashq(const std::vector<double>& q, const HostFlashQCache& cache,
                                            const std::vector<int>& compressed_lens, const std::vector<int>& buffer_lens,
                                            int heads_q, int q_len, bool causal, double softmax_scale,
                                            std::vector<double>* lse = nullptr);

}  // namespace test
}  // namespace qattn

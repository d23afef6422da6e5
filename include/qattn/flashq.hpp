// TurboAttention's FlashQ KV cache: INT4/INT2 per-channel blocks of 64 tokens with a per-head bit width
// (head-wise mixed precision), plus an INT8 buffer of the newest tokens that is compressed into a new
// block every 64 decode steps. The byte layout is the flashq paragraph of
// templates/qattn/decode/kv_layout.h; this header holds its host-side sizes, the choice of the head bit
// widths, and the two runtime calls that write the cache (Runtime::flashq_prefill / flashq_append).
//
// Spec: `decode qk=flashq:per_channel pv=flashq:per_channel out=<fp16|bf16> d=<64|128|256> [paged] ...`
// (out is also the element type of the new K/V tokens). Decode reads blocks for tokens
// [0, compressed_lens[b]) and the buffer for [compressed_lens[b], compressed_lens[b] + buffer_lens[b]).
#pragma once
#include <vector>

#include "qattn/abi.h"
#include "qattn/export.h"
#include "qattn/spec.hpp"

QATTN_PUBLIC_BEGIN
namespace qattn {

// Bit width (2 or 4) of every KV head, K and V separately.
struct FlashQHeads {
  std::vector<int> k_bits, v_bits;
};

// Per-channel statistics of one cache (K or V) over the tokens they were taken from: min and max of
// channel c of head h at [h * d + c].
struct FlashQChannelStats {
  int heads_kv = 0, d = 0;
  std::vector<float> min, max;
};

// Head-wise mixed precision (TurboAttention §3.2): priority_h = gap_h * sigma_h, where
// gap_h = max over the head's channels of max_c - min over them of min_c (the head's whole value range)
// and sigma_h = the population standard deviation of the channel gaps max_c - min_c (float64).
std::vector<double> flashq_priority(const FlashQChannelStats& stats);
// The n_low lowest-priority heads get 2 bits, the others 4; ties go by head index (the lower index is
// the lower priority). n_low = -1: heads / 2. Throws bad_input for n_low outside [-1, heads].
std::vector<int> flashq_choose_bits(const std::vector<double>& priority, int n_low = -1);
// Both caches, ranked separately.
FlashQHeads flashq_choose_heads(const FlashQChannelStats& k, const FlashQChannelStats& v, int n_low = -1);
// The universal INT8 scale of each head: absmax / 127 (fp32) with absmax = max(|min|, |max|) over the
// head's channels; a head that is all zeros gets 1 / 127 (absmax taken as 1).
std::vector<float> flashq_universal_scales(const FlashQChannelStats& stats);

// Byte layout of the blocks of one cache (K or V): block h holds kv::flashq_block_bytes(bits[h], d)
// bytes at head_offset[h] of a page (the heads' blocks back to back, in head order).
struct FlashQLayout {
  int d = 0;
  std::vector<int> bits;
  std::vector<long long> block_bytes, head_offset;
  long long page_bytes = 0;   // the default page stride: the sum of the block bytes
};
// Throws bad_input for d not in {64, 128, 256}, no heads, or bits other than 2 and 4.
FlashQLayout flashq_layout(int d, const std::vector<int>& bits);
// The page of a cache whose heads all have 4 bits: an upper bound for any bit choice.
long long flashq_max_page_bytes(int d, int heads_kv);
// The head table of DecodeParams::fq_heads: [2][heads_kv][2] = (bits, head_offset), K then V.
std::vector<int> flashq_head_table(const FlashQLayout& k, const FlashQLayout& v);
// The INT8 buffer: int8:per_token rows (4 + d bytes), kv::kFlashQBufferRows rows per (sequence, head);
// default strides head = rows * row bytes, sequence = heads_kv * head, and the bytes of one buffer.
int flashq_buffer_row_bytes(int d);
long long flashq_buffer_head_stride(int d);
long long flashq_buffer_bytes(int d, int batch, int heads_kv);

// A FlashQ cache on the device (K and V). Every pointer is a device pointer; blocks, buffers and their
// strides are 16-byte multiples, the int/float arrays 4-byte aligned.
struct FlashQCacheView {
  void* k_blocks = nullptr;
  void* v_blocks = nullptr;
  // Bytes between pages (a page = one block of every head). 0: flashq_layout(d, bits).page_bytes.
  long long k_page_stride = 0, v_page_stride = 0;
  int max_blocks = 0;                // contiguous: pages per sequence; block j of sequence b is page b * max_blocks + j
  const int* block_table = nullptr;  // paged (spec `paged`): [batch][table_stride] page ids, one per block of 64 tokens
  int table_stride = 0;
  int* heads = nullptr;              // [2][heads_kv][2] = DecodeParams::fq_heads; flashq_prefill writes it
  FlashQHeads bits;                  // host copy of the bit widths (flashq_prefill: empty = it chooses them)
  void* k_buffer = nullptr;          // INT8 buffers, int8:per_token rows, [batch][heads_kv][kFlashQBufferRows]
  void* v_buffer = nullptr;
  long long buffer_page_stride = 0, buffer_head_stride = 0;   // 0: the defaults above
  int* compressed_lens = nullptr;    // [batch] tokens in blocks (a multiple of 64)
  int* buffer_lens = nullptr;        // [batch] tokens in the buffer (< 64 after prefill, <= 79 after append; 80 when out of blocks)
  float* k_scale8 = nullptr;         // [heads_kv] universal INT8 scales; flashq_prefill writes them
  float* v_scale8 = nullptr;
};

// Fills an empty cache with the prefill tokens: sequence b's lens[b] tokens (of k, v: fp16/bf16 of
// type spec.out, [batch, heads_kv, n, d] with the strides below; 0,0,0 = contiguous) become
// lens[b] / 64 blocks (stage 1 per (block, head): alpha = absmax / 127; stage 2 per channel) and
// lens[b] % 64 buffer rows; compressed_lens and buffer_lens are set.
// Statistics (per-channel min / max over every sequence's tokens, on the device, copied back) are taken
// when the bits of K or V or the scales are not given; then the call waits for the stream.
struct FlashQPrefillCall {
  Spec spec;
  int batch = 1, heads_kv = 1, n = 1;
  const void* k = nullptr;
  const void* v = nullptr;
  long long sb = 0, sh = 0, ss = 0;   // elements
  std::vector<int> lens;              // tokens per sequence, each in [0, n]; empty: n for all
  FlashQCacheView cache;
  int n_low = -1;                     // when choosing bits: heads at 2 bits (-1: heads_kv / 2)
  std::vector<float> k_scale8, v_scale8;   // [heads_kv] given universal scales; empty: flashq_universal_scales
};

// What flashq_prefill chose (copy bits and the page strides into the view for the later calls).
struct FlashQPrefillInfo {
  FlashQHeads bits;
  std::vector<float> k_scale8, v_scale8;
  long long k_page_stride = 0, v_page_stride = 0;
  FlashQChannelStats k_stats, v_stats;           // empty when no statistics were needed
  std::vector<double> k_priority, v_priority;    // empty when the bits were given
};

// One decode step: n_new (1..16) tokens per sequence (k, v as in the prefill call, [batch, heads_kv,
// n_new, d]). On the device, per sequence: when buffer_lens[b] >= 64, buffer rows [0, 64) become block
// compressed_lens[b] / 64 (alpha = the universal scale, codes from the stored INT8 values), the rows
// after them move to the front and the lengths move by 64; then the new tokens are appended as INT8 rows
// with the universal scale (|x| > 127 scale clamped) and buffer_lens[b] grows by n_new. No host sync.
// A sequence whose blocks are all used keeps its buffer (at most kFlashQBufferRows rows; tokens beyond
// are dropped): size max_blocks / table_stride for the longest sequence.
struct FlashQAppendCall {
  Spec spec;
  int batch = 1, heads_kv = 1, n_new = 1;
  const void* k = nullptr;
  const void* v = nullptr;
  long long sb = 0, sh = 0, ss = 0;
  FlashQCacheView cache;   // bits set (the prefill's choice)
};

}  // namespace qattn
QATTN_PUBLIC_END

// Parameters of the FlashQ cache kernels (templates/qattn/decode/flashq_pack.cuh), shared by the host
// (runtime/calls/flashq_call.cpp) and the device. The cache's byte layout is the flashq paragraph of
// qattn/decode/kv_layout.h. Like abi.h: plain C++, trivially copyable, 8-byte members first.
#pragma once
#include "qattn/abi.h"

namespace qattn {

// One FlashQ cache (K or V) on the device.
//   block (b, h, j) (tokens [64 j, 64 j + 64) of KV head h) at
//     blocks + page * page_stride + head_offset_h,  page = block_table[b * table_stride + j] (paged)
//                                                        or b * max_blocks + j (contiguous)
//   buffer row (b, h, slot) at  buffer + b * buffer_page_stride + h * buffer_head_stride + slot * (4 + d)
//   scale8[h]: the head's universal INT8 scale (every buffer row's scale, and alpha of a flushed block).
struct FlashQCacheRef {
  unsigned char* blocks;
  unsigned char* buffer;
  const float* scale8;
  long long page_stride;
  long long buffer_page_stride, buffer_head_stride;
};

// One launch of a FlashQ kernel. Kernel k (K) or v (V) of each pair is picked by the CTA.
//  x: new tokens, fp16/bf16 [batch, heads_kv, n, d] (TensorRef order, sc = 1).
//  heads: the head table [2][heads_kv][2] = (bits, byte offset of the head's block in a page), K then
//    V (DecodeParams::fq_heads).
//  compressed_lens, buffer_lens: [batch] tokens in blocks / in the buffer (the stats and prefill kernels
//    read them as the prefill lengths: compressed + buffer; the append kernel reads them and the lens
//    kernel advances them).
//  stats: [2][heads_kv][2][d] per-channel min then max (the stats kernel; initialised to +inf / -inf).
//  n: tokens per sequence in x (prefill: the longest sequence; append: n_new).
//  max_blocks: blocks a sequence can hold (contiguous: its pages; paged: table_stride).
struct FlashQPackParams {
  TensorRef x[2];
  FlashQCacheRef cache[2];
  const int* heads;
  const int* block_table;
  int* compressed_lens;
  int* buffer_lens;
  float* stats;
  int batch, heads_kv, n;
  int max_blocks, table_stride;
};

}  // namespace qattn

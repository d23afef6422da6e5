// Byte layout of qattn's KV cache, shared by the host library, the tests and the device code.
//
// A cache holds one ROW per (token, KV head): an optional header with the row's quantization
// parameters, then the head_dim (d) elements. Rows of one KV head are contiguous ("HND" order), so a
// run of tokens of one head is one contiguous byte range:
//
//   contiguous cache: row (b, h, t) at  base + b * page_stride + h * head_stride + t * row_bytes
//   paged cache:      row (b, h, t) at  base + P * page_stride + h * head_stride + (t % page_size) * row_bytes
//                     with P = block_table[b * table_stride + t / page_size]
//   defaults:         head_stride = capacity (or page_size) * row_bytes,  page_stride = heads_kv * head_stride
//
// Formats (spec token qk= / pv=, the K and the V cache):
//   fp16, bf16        no header; d elements of 2 bytes.                                  row = 2d bytes
//   int8:per_token    header: fp32 scale (4 bytes); d signed codes.                      row = 4 + d
//                     x ~= scale * q,  scale = max|x| / 127,  q = rint(x * (127 / max|x|)) in [-127, 127]
//   int4:per_token    header: (scale, shift) as two fp16, scale first (4 bytes);        row = 4 + d/2
//                     d/2 bytes of codes, element e in byte e/2, low nibble when e is even.
//   int4:per_group    the same with 4 groups of d/4 channels: 4 (scale, shift) pairs    row = 16 + d/2
//                     (group g at header bytes 4g..4g+3), then the codes.
//                     per group: scale = fp16((max - min) / 15), shift = fp16(min),
//                     q = rint((x - shift) * (1 / scale)) clamped to [0, 15] (computed with the fp16-
//                     rounded scale and shift, so the codes fit what the kernel dequantizes);
//                     x ~= q * scale + shift.  A constant group (max == min) stores scale 0, codes 0.
//   fp8e4m3:per_head  no header; d OCP e4m3 codes (1 sign, 4 exponent, 3 mantissa bits,   row = d bytes
//                     bias 7, max 448, 0x7F/0xFF NaN never written). One fp32 scale per KV head,
//                     outside the rows (k_head_scale / v_head_scale): x ~= scale_h * e4m3(code),
//                     code = e4m3_rn(clamp(x / scale_h, -448, 448)); kv_head_scales() picks
//                     scale_h = max|x| / 448 from sample tokens.
// For d = 128 the int4 rows are the INT4-KV GQA note's 68-byte (1 group) and 80-byte (4 groups) rows.
//
// flashq:per_channel (TurboAttention FlashQ). Two parts per cache (K and V each):
//   blocks  tokens [0, compressed_len) in BLOCKS of kFlashQBlock = 64 tokens of one KV head. Head h has
//           its own bit width bits_h (2 or 4, per K and per V: head-wise mixed precision). A block:
//             bytes [0, 4)        fp32 alpha: the stage-1 (symmetric INT8) scale of the block's values
//             bytes [4, 16)       zero
//             bytes [16, 16+d)    uint8 s_c  per channel: the stage-2 step (integer >= 1)
//             bytes [16+d, 16+2d) int8  m_c  per channel: the stage-2 offset (the INT8 minimum)
//             bytes [16+2d, ...)  codes, token-major: token r's d codes at 16 + 2d + r * d * bits / 8;
//                                 int4: channel e in byte e/2, low nibble first; int2: channel e in
//                                 byte e/4 at bits 2 * (e % 4).
//           x ~= alpha * (s_c * code + m_c): INT8 value x8 = rint(x / alpha) in [-127, 127] (stage 1),
//           then per channel over the block's 64 tokens s_c = max(1, ceil((max x8 - min x8) / (2^bits - 1))),
//           m_c = min x8, code = min(rint((x8 - m_c) / s_c), 2^bits - 1)  (stage 2; |x8 - s_c code - m_c|
//           <= s_c / 2, and s_c * code + m_c is an exact integer in fp16). block_bytes(bits, d).
//           A page is one block of every KV head, head h at byte offset head_offset_h (the sum of the
//           block bytes of heads < h, each a 16-byte multiple); contiguous caches are pages
//           b * max_blocks + token / 64, paged ones block_table[b * table_stride + token / 64].
//   buffer  tokens [compressed_len, compressed_len + buffer_len) as int8:per_token rows (the layout
//           above), buffer slot j = token compressed_len + j, with one "universal" scale per KV head
//           (values beyond 127 * scale are clamped). When the buffer holds kFlashQBlock tokens, they are
//           compressed into a new block (alpha = the universal scale) and the buffer empties: every
//           n_b = 64 decode steps. Capacity kFlashQBufferRows rows (64 + up to 16 new tokens).
//
// Alignment: rows are 4-byte multiples, so every run of 4 rows is a 16-byte multiple; the kernels copy
// 16-byte units, which needs the base, page_stride and head_stride to be 16-byte multiples and (for a
// paged cache) page_size to be a multiple of 4. validate_cache() on the host checks all of it.
#pragma once
#include "qattn/abi.h"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define QATTN_KV_FN __host__ __device__ constexpr
#else
#define QATTN_KV_FN constexpr
#endif

namespace qattn::kv {

// Groups of (scale, shift) pairs per int4 row for the per_group granularity.
constexpr int kInt4Groups = 4;
// FlashQ: tokens per compressed block (= page) and rows of the INT8 buffer.
constexpr int kFlashQBlock = 64;
constexpr int kFlashQBufferRows = 80;
constexpr int kFlashQHeaderBytes = 16;
constexpr float kFp8Max = 448.f;

QATTN_KV_FN bool format_ok(Fmt f, Gran g) {
  return ((f == Fmt::fp16 || f == Fmt::bf16) && g == Gran::none) || (f == Fmt::int8 && g == Gran::per_token) ||
         (f == Fmt::int4 && (g == Gran::per_token || g == Gran::per_group)) ||
         (f == Fmt::fp8e4m3 && g == Gran::per_head) || (f == Fmt::flashq && g == Gran::per_channel);
}
// Row layout (every format but flashq, whose blocks are below).
QATTN_KV_FN int groups(Fmt f, Gran g) { return f == Fmt::int4 && g == Gran::per_group ? kInt4Groups : 1; }
QATTN_KV_FN int header_bytes(Fmt f, Gran g) { return f == Fmt::int8 ? 4 : f == Fmt::int4 ? 4 * groups(f, g) : 0; }
QATTN_KV_FN int data_bytes(Fmt f, int d) {
  return f == Fmt::int4 ? d / 2 : (f == Fmt::int8 || f == Fmt::fp8e4m3) ? d : 2 * d;
}
QATTN_KV_FN int row_bytes(Fmt f, Gran g, int d) { return header_bytes(f, g) + data_bytes(f, d); }

// FlashQ blocks.
QATTN_KV_FN int flashq_code_row_bytes(int bits, int d) { return d * bits / 8; }
QATTN_KV_FN int flashq_codes_offset(int d) { return kFlashQHeaderBytes + 2 * d; }
QATTN_KV_FN int flashq_block_bytes(int bits, int d) {
  return flashq_codes_offset(d) + kFlashQBlock * flashq_code_row_bytes(bits, d);
}

}  // namespace qattn::kv

#undef QATTN_KV_FN

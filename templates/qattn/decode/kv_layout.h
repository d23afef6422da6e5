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
// For d = 128 the int4 rows are the INT4-KV GQA note's 68-byte (1 group) and 80-byte (4 groups) rows.
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

QATTN_KV_FN bool format_ok(Fmt f, Gran g) {
  return ((f == Fmt::fp16 || f == Fmt::bf16) && g == Gran::none) || (f == Fmt::int8 && g == Gran::per_token) ||
         (f == Fmt::int4 && (g == Gran::per_token || g == Gran::per_group));
}
QATTN_KV_FN int groups(Fmt f, Gran g) { return f == Fmt::int4 && g == Gran::per_group ? kInt4Groups : 1; }
QATTN_KV_FN int header_bytes(Fmt f, Gran g) { return f == Fmt::int8 ? 4 : f == Fmt::int4 ? 4 * groups(f, g) : 0; }
QATTN_KV_FN int data_bytes(Fmt f, int d) { return f == Fmt::int4 ? d / 2 : f == Fmt::int8 ? d : 2 * d; }
QATTN_KV_FN int row_bytes(Fmt f, Gran g, int d) { return header_bytes(f, g) + data_bytes(f, d); }

}  // namespace qattn::kv

#undef QATTN_KV_FN

// Host model of qattn's KV cache (the byte layout of templates/qattn/decode/kv_layout.h) and the
// float64 decode-attention reference the decode kernels are checked against.
//
// quantize_kv_row is the bit-exact mirror of what the append kernel must write: the same fp32
// operations in the same order (amax / 127.f, rintf(x * inv), fp16 round-to-nearest-even of the int4
// scale and shift), so a GPU-written row can be compared byte for byte. dequantize_kv_row decodes
// exactly in float64 (every stored value and product is representable), so the reference sees
// precisely the numbers the cache holds.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qattn/abi.h"
#include "qattn/decode/kv_layout.h"

namespace qattn {
namespace test {

// A KV-cache element format: fp16/bf16 with Gran::none, int8 per_token, int4 per_token or per_group, or
// fp8e4m3 per_head (rows of codes; the scale is the head's, HostKvCache::head_scale).
struct KvFormat {
  Fmt fmt;
  Gran gran;
};
std::vector<KvFormat> all_kv_formats();   // the five formats whose rows carry their own parameters
KvFormat fp8_kv_format();                 // fp8e4m3:per_head (its scale lives outside the rows)
std::string kv_format_name(Fmt f, Gran g);   // the spec token: "fp16", "int8:per_token", "int4:per_group", ...

// The layouts are little endian whatever the host is: fp32 values stored and loaded byte by byte.
void store_f32(unsigned char* p, float f);
float load_f32(const unsigned char* p);

// Bytes of one row (token, KV head); throws std::invalid_argument for a format kv_layout.h lacks.
int kv_row_bytes(Fmt f, Gran g, int d);

// One row of d elements, x -> row (kv_row_bytes bytes) and back.
// head_scale: fp8e4m3 only (x is stored as e4m3(x * (1 / head_scale)), read back as head_scale * value).
void quantize_kv_row(Fmt f, Gran g, int d, const float* x, unsigned char* row, float head_scale = 1.f);
void dequantize_kv_row(Fmt f, Gran g, int d, const unsigned char* row, double* out, float head_scale = 1.f);

// fp8e4m3:per_head scales: per KV head, max |x| / 448 over x [heads_kv][tokens][d] (1 for an all-zero head).
std::vector<float> fp8_head_scales(const std::vector<float>& x, int heads_kv, int tokens, int d);

// A K or V cache in host memory, addressed like the device one (all strides in bytes).
struct HostKvCache {
  Fmt fmt = Fmt::fp16;
  Gran gran = Gran::none;
  int d = 0, batch = 0, heads_kv = 0;
  bool paged = false;
  int capacity = 0;          // tokens one sequence can hold (paged: pages per sequence * page_size)
  int page_size = 0;         // paged only
  int table_stride = 0;      // paged only: block-table entries per sequence
  std::vector<int> block_table;   // paged only: [batch][table_stride] page ids
  long long page_stride = 0, head_stride = 0;
  std::vector<unsigned char> bytes;
  std::vector<float> head_scale;   // fp8e4m3: [heads_kv] (make_* fill it with 1)

  int row_bytes() const { return kv_row_bytes(fmt, gran, d); }
};

// Byte every fresh cache is filled with: 0xFFFF is a NaN as fp16 and bf16, 0xFFFFFFFF a NaN as the
// int8 fp32 scale, so a row read before anything was written decodes to NaN.
constexpr unsigned char kKvPoison = 0xFF;

// Default strides: head_stride = capacity * row_bytes, page_stride = heads_kv * head_stride.
// (The kernels also need head_stride to be a multiple of 16 bytes: capacity a multiple of 4.)
HostKvCache make_contiguous(Fmt f, Gran g, int d, int batch, int heads_kv, int capacity);
// batch * pages_per_seq pages of page_size tokens; the block table is a seeded random permutation of
// the page ids (table_stride = pages_per_seq), so each sequence's pages are scattered over the pool.
HostKvCache make_paged(Fmt f, Gran g, int d, int batch, int heads_kv, int page_size, int pages_per_seq,
                       std::uint64_t seed);

// Byte offset of row (b, h, t) in cache.bytes (the kv_layout.h formulas); throws std::out_of_range
// for b, h or t outside the cache.
long long row_offset(const HostKvCache& cache, int b, int h, int t);
void write_token(HostKvCache& cache, int b, int h, int t, const float* x);   // quantizes d values
void read_token(const HostKvCache& cache, int b, int h, int t, double* out);   // dequantizes d values

// Float64 decode attention over the dequantized caches.
//   q: [batch][heads_q][q_len][d] contiguous; returns O with the same shape.
//   GQA: query head hq reads KV head hq / (heads_q / heads_kv).
//   Query token i of sequence b sees cache tokens t < kv_lens[b] and, when causal, t <= kv_lens[b] - q_len + i.
//   softmax_scale 0 means 1/sqrt(d). A row that sees no token gives 0 and LSE -inf.
//   lse (optional): natural-log log-sum-exp of the scaled scores, [batch][heads_q][q_len].
std::vector<double> reference_decode(const std::vector<double>& q, const HostKvCache& k, const HostKvCache& v,
                                     const std::vector<int>& kv_lens, int heads_q, int q_len, bool causal,
                                     double softmax_scale, std::vector<double>* lse = nullptr);

}  // namespace test
}  // namespace qattn

#include "tests/common/kv_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>

#include "qattn/decode/fp8_e4m3.h"
#include "tests/common/random_data.hpp"
#include "reference/attention.hpp"
#include "tests/common/reference_attention.hpp"

namespace qattn {
namespace test {

namespace {

// d must split into kv::kInt4Groups groups of whole bytes of int4 codes (two codes per byte).
void require_kv_format(Fmt f, Gran g, int d) {
  if (!kv::format_ok(f, g)) throw std::invalid_argument("not a KV-cache format: " + kv_format_name(f, g));
  if (d <= 0 || d % (2 * kv::kInt4Groups) != 0)
    throw std::invalid_argument("KV head dim must be a positive multiple of 8, got " + std::to_string(d));
}

// The layout is little endian whatever the host is, so bytes are assembled explicitly.
void store_u16(unsigned char* p, std::uint16_t v) {
  p[0] = static_cast<unsigned char>(v & 0xFF);
  p[1] = static_cast<unsigned char>(v >> 8);
}
std::uint16_t load_u16(const unsigned char* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }

// Half rounding from fp32 goes through float64, which holds every float exactly: one rounding, RNE,
// the same result as the device's __float2half_rn / __float2bfloat16_rn.
void quantize_half_row(Fmt f, int d, const float* x, unsigned char* row) {
  for (int e = 0; e < d; ++e) store_u16(row + 2 * e, to_half_bits(x[e], f));
}

// Written step by step in fp32 so the device code can repeat each operation bit for bit.
void quantize_int8_row(int d, const float* x, unsigned char* row) {
  float amax = 0.f;
  for (int e = 0; e < d; ++e) amax = std::max(amax, std::fabs(x[e]));
  const float scale = amax / 127.f;
  const float inv = amax > 0.f ? 127.f / amax : 0.f;
  store_f32(row, scale);
  for (int e = 0; e < d; ++e) {
    const int q = std::clamp(static_cast<int>(std::rint(x[e] * inv)), -127, 127);
    row[4 + e] = static_cast<unsigned char>(static_cast<signed char>(q));
  }
}

// Codes of element e: byte e/2 of the code area, low nibble for even e.
void put_nibble(unsigned char* codes, int e, int q) {
  unsigned char& byte = codes[e / 2];
  const int kept = e % 2 == 0 ? byte & 0xF0 : byte & 0x0F;
  byte = static_cast<unsigned char>(kept | (e % 2 == 0 ? q : q << 4));
}
int get_nibble(const unsigned char* codes, int e) { return e % 2 == 0 ? codes[e / 2] & 0x0F : codes[e / 2] >> 4; }

// One group of int4 channels [begin, end): the (scale, shift) pair at `header`, codes into `codes`.
// The codes use the fp16-rounded scale and shift, i.e. exactly what dequantization will multiply by.
// A constant group has scale 0, hence inv 0 and codes 0: it decodes to fp16(min), with no NaN.
void quantize_int4_group(const float* x, int begin, int end, unsigned char* header, unsigned char* codes) {
  float mn = x[begin], mx = x[begin];
  for (int e = begin + 1; e < end; ++e) mn = std::min(mn, x[e]), mx = std::max(mx, x[e]);
  const std::uint16_t scale_h = to_fp16_bits((mx - mn) / 15.f);
  const std::uint16_t shift_h = to_fp16_bits(mn);
  store_u16(header, scale_h);
  store_u16(header + 2, shift_h);
  const float s = static_cast<float>(fp16_bits_to_double(scale_h));
  const float sh = static_cast<float>(fp16_bits_to_double(shift_h));
  const float inv = s > 0.f ? 1.f / s : 0.f;
  for (int e = begin; e < end; ++e)
    put_nibble(codes, e, std::clamp(static_cast<int>(std::rint((x[e] - sh) * inv)), 0, 15));
}

void quantize_int4_row(Gran g, int d, const float* x, unsigned char* row) {
  const int groups = kv::groups(Fmt::int4, g), per_group = d / groups;
  unsigned char* codes = row + kv::header_bytes(Fmt::int4, g);
  for (int gi = 0; gi < groups; ++gi) quantize_int4_group(x, gi * per_group, (gi + 1) * per_group, row + 4 * gi, codes);
}

void dequantize_int4_row(Gran g, int d, const unsigned char* row, double* out) {
  const int groups = kv::groups(Fmt::int4, g), per_group = d / groups;
  const unsigned char* codes = row + kv::header_bytes(Fmt::int4, g);
  for (int e = 0; e < d; ++e) {
    const unsigned char* pair = row + 4 * (e / per_group);
    // q * scale (15 significant bits) plus shift is exact in float64.
    out[e] = get_nibble(codes, e) * fp16_bits_to_double(load_u16(pair)) + fp16_bits_to_double(load_u16(pair + 2));
  }
}

void check_index(bool ok, const char* what) {
  if (!ok) throw std::out_of_range(std::string("KV cache: ") + what + " out of range");
}

HostKvCache make_cache(Fmt f, Gran g, int d, int batch, int heads_kv) {
  require_kv_format(f, g, d);
  if (batch <= 0 || heads_kv <= 0) throw std::invalid_argument("KV cache: batch and heads_kv must be positive");
  HostKvCache c;
  c.fmt = f;
  c.gran = g;
  c.d = d;
  c.batch = batch;
  c.heads_kv = heads_kv;
  c.head_scale.assign(static_cast<size_t>(heads_kv), 1.f);
  return c;
}

// Default strides for `tokens` rows per (page or sequence, head), and `units` pages or sequences.
void lay_out(HostKvCache& c, int tokens, int units) {
  c.head_stride = 1LL * tokens * c.row_bytes();
  c.page_stride = c.heads_kv * c.head_stride;
  c.bytes.assign(static_cast<size_t>(units * c.page_stride), kKvPoison);
}

void check_decode_args(const std::vector<double>& q, const HostKvCache& k, const HostKvCache& v,
                       const std::vector<int>& kv_lens, int heads_q, int q_len) {
  if (k.batch != v.batch || k.heads_kv != v.heads_kv || k.d != v.d)
    throw std::invalid_argument("reference_decode: K and V caches differ in batch, heads or d");
  if (heads_q <= 0 || heads_q % k.heads_kv != 0)
    throw std::invalid_argument("reference_decode: heads_q must be a positive multiple of heads_kv");
  if (q_len <= 0) throw std::invalid_argument("reference_decode: q_len must be positive");
  if (kv_lens.size() != static_cast<size_t>(k.batch))
    throw std::invalid_argument("reference_decode: kv_lens needs one entry per sequence");
  for (int len : kv_lens)
    if (len < 0 || len > std::min(k.capacity, v.capacity))
      throw std::invalid_argument("reference_decode: a kv_lens entry exceeds the cache capacity");
  if (q.size() != static_cast<size_t>(k.batch) * heads_q * q_len * k.d)
    throw std::invalid_argument("reference_decode: q must be [batch][heads_q][q_len][d]");
}

// Dequantized rows 0..n-1 of head (b, h), n x d row-major.
std::vector<double> read_head(const HostKvCache& c, int b, int h, int n) {
  std::vector<double> rows(static_cast<size_t>(n) * c.d);
  for (int t = 0; t < n; ++t) read_token(c, b, h, t, &rows[static_cast<size_t>(t) * c.d]);
  return rows;
}

// Softmax attention of one query row over the first n rows of kh/vh ([n][d] each): the library's
// row kernel itself, so this model and reference_attention agree to the last bit on equal inputs.
double attend_row(const double* qi, const std::vector<double>& kh, const std::vector<double>& vh, long long n,
                  int d, double scale, double* out) {
  return reference::attend_row(qi, kh.data(), vh.data(), n, d, d, scale, out);
}

}  // namespace

void store_f32(unsigned char* p, float f) {
  std::uint32_t v;
  std::memcpy(&v, &f, sizeof v);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>((v >> (8 * i)) & 0xFF);
}
float load_f32(const unsigned char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  float f;
  std::memcpy(&f, &v, sizeof f);
  return f;
}

std::vector<KvFormat> all_kv_formats() {
  return {{Fmt::fp16, Gran::none},
          {Fmt::bf16, Gran::none},
          {Fmt::int8, Gran::per_token},
          {Fmt::int4, Gran::per_token},
          {Fmt::int4, Gran::per_group}};
}

KvFormat fp8_kv_format() { return {Fmt::fp8e4m3, Gran::per_head}; }

std::vector<float> fp8_head_scales(const std::vector<float>& x, int heads_kv, int tokens, int d) {
  if (x.size() != static_cast<size_t>(heads_kv) * tokens * d) throw std::invalid_argument("fp8_head_scales: size mismatch");
  std::vector<float> s(static_cast<size_t>(heads_kv), 1.f);
  for (int h = 0; h < heads_kv; ++h) {
    float amax = 0.f;
    for (size_t i = 0; i < static_cast<size_t>(tokens) * d; ++i) amax = std::max(amax, std::fabs(x[h * static_cast<size_t>(tokens) * d + i]));
    if (amax > 0.f) s[static_cast<size_t>(h)] = amax / kv::kFp8Max;
  }
  return s;
}

std::string kv_format_name(Fmt f, Gran g) {
  const char* fmt = f == Fmt::fp16   ? "fp16"
                    : f == Fmt::bf16 ? "bf16"
                    : f == Fmt::int8 ? "int8"
                    : f == Fmt::int4 ? "int4"
                    : f == Fmt::fp8e4m3 ? "fp8e4m3"
                                     : "fmt?";
  if (g == Gran::none) return fmt;
  const char* gran = g == Gran::per_token   ? "per_token"
                     : g == Gran::per_group ? "per_group"
                     : g == Gran::per_head  ? "per_head"
                                            : "gran?";
  return std::string(fmt) + ":" + gran;
}

int kv_row_bytes(Fmt f, Gran g, int d) {
  require_kv_format(f, g, d);
  return kv::row_bytes(f, g, d);
}

void quantize_kv_row(Fmt f, Gran g, int d, const float* x, unsigned char* row, float head_scale) {
  require_kv_format(f, g, d);
  if (f == Fmt::fp8e4m3) {
    const float inv = 1.f / head_scale;   // the append kernel's __fdiv_rn(1, scale), then one product each
    for (int e = 0; e < d; ++e) row[e] = fp8::encode_e4m3(x[e] * inv);
    return;
  }
  if (f == Fmt::int8) return quantize_int8_row(d, x, row);
  if (f == Fmt::int4) return quantize_int4_row(g, d, x, row);
  quantize_half_row(f, d, x, row);
}

void dequantize_kv_row(Fmt f, Gran g, int d, const unsigned char* row, double* out, float head_scale) {
  require_kv_format(f, g, d);
  if (f == Fmt::fp8e4m3) {
    for (int e = 0; e < d; ++e) out[e] = static_cast<double>(head_scale) * fp8::decode_e4m3(row[e]);
    return;
  }
  if (f == Fmt::int4) return dequantize_int4_row(g, d, row, out);
  if (f == Fmt::int8) {
    const double scale = load_f32(row);
    for (int e = 0; e < d; ++e) out[e] = static_cast<signed char>(row[4 + e]) * scale;
    return;
  }
  for (int e = 0; e < d; ++e) out[e] = half_bits_to_double(load_u16(row + 2 * e), f);
}

HostKvCache make_contiguous(Fmt f, Gran g, int d, int batch, int heads_kv, int capacity) {
  if (capacity <= 0) throw std::invalid_argument("make_contiguous: capacity must be positive");
  HostKvCache c = make_cache(f, g, d, batch, heads_kv);
  c.capacity = capacity;
  lay_out(c, capacity, batch);
  return c;
}

HostKvCache make_paged(Fmt f, Gran g, int d, int batch, int heads_kv, int page_size, int pages_per_seq,
                       std::uint64_t seed) {
  if (page_size <= 0 || pages_per_seq <= 0)
    throw std::invalid_argument("make_paged: page_size and pages_per_seq must be positive");
  HostKvCache c = make_cache(f, g, d, batch, heads_kv);
  c.paged = true;
  c.page_size = page_size;
  c.table_stride = pages_per_seq;
  c.capacity = page_size * pages_per_seq;
  const int pages = batch * pages_per_seq;
  c.block_table.resize(static_cast<size_t>(pages));
  std::iota(c.block_table.begin(), c.block_table.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(c.block_table.begin(), c.block_table.end(), rng);
  lay_out(c, page_size, pages);
  return c;
}

long long row_offset(const HostKvCache& c, int b, int h, int t) {
  check_index(b >= 0 && b < c.batch, "sequence");
  check_index(h >= 0 && h < c.heads_kv, "head");
  check_index(t >= 0 && t < c.capacity, "token");
  const long long head = h * c.head_stride;
  if (!c.paged) return b * c.page_stride + head + 1LL * t * c.row_bytes();
  const int page = c.block_table[static_cast<size_t>(b) * c.table_stride + t / c.page_size];
  return page * c.page_stride + head + 1LL * (t % c.page_size) * c.row_bytes();
}

void write_token(HostKvCache& c, int b, int h, int t, const float* x) {
  quantize_kv_row(c.fmt, c.gran, c.d, x, &c.bytes[static_cast<size_t>(row_offset(c, b, h, t))],
                  c.head_scale[static_cast<size_t>(h)]);
}

void read_token(const HostKvCache& c, int b, int h, int t, double* out) {
  dequantize_kv_row(c.fmt, c.gran, c.d, &c.bytes[static_cast<size_t>(row_offset(c, b, h, t))], out,
                    c.head_scale[static_cast<size_t>(h)]);
}

std::vector<double> reference_decode(const std::vector<double>& q, const HostKvCache& k, const HostKvCache& v,
                                     const std::vector<int>& kv_lens, int heads_q, int q_len, bool causal,
                                     double softmax_scale, std::vector<double>* lse) {
  check_decode_args(q, k, v, kv_lens, heads_q, q_len);
  const int d = k.d, group = heads_q / k.heads_kv;
  const double scale = softmax_scale != 0.0 ? softmax_scale : 1.0 / std::sqrt(d);
  std::vector<double> o(q.size(), 0.0);
  if (lse) lse->assign(static_cast<size_t>(k.batch) * heads_q * q_len, 0.0);
  for (int b = 0; b < k.batch; ++b)
    for (int hk = 0; hk < k.heads_kv; ++hk) {
      // Each KV head is dequantized once and shared by its `group` query heads.
      const std::vector<double> kh = read_head(k, b, hk, kv_lens[b]), vh = read_head(v, b, hk, kv_lens[b]);
      for (int hq = hk * group; hq < (hk + 1) * group; ++hq)
        for (int i = 0; i < q_len; ++i) {
          const size_t row = (static_cast<size_t>(b) * heads_q + hq) * q_len + i;
          const long long n = visible_keys(i, q_len, kv_lens[b], causal);
          const double l = attend_row(&q[row * d], kh, vh, n, d, scale, &o[row * d]);
          if (lse) (*lse)[row] = l;
        }
    }
  return o;
}

}  // namespace test
}  // namespace qattn

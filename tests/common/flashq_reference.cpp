#include "tests/common/flashq_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

#include "reference/attention.hpp"
#include "tests/common/reference_attention.hpp"

namespace qattn {
namespace test {

namespace {

constexpr int kBlock = kv::kFlashQBlock;

void require_block_args(int bits, int d) {
  if (bits != 2 && bits != 4) throw std::invalid_argument("flashq: bits must be 2 or 4, got " + std::to_string(bits));
  if (d <= 0 || d % 32 != 0) throw std::invalid_argument("flashq: d must be a positive multiple of 32, got " + std::to_string(d));
}

// rint((n) / s) for 0 <= n, 1 <= s, half to even, in integers (what the device computes).
int round_div(int n, int s) {
  int q = n / s;
  const int rem = n - q * s;
  if (2 * rem > s || (2 * rem == s && (q & 1))) ++q;
  return q;
}

const std::vector<unsigned char>& blocks_of(const HostFlashQCache& c, int which) { return which == 0 ? c.k_blocks : c.v_blocks; }
std::vector<unsigned char>& blocks_of(HostFlashQCache& c, int which) { return which == 0 ? c.k_blocks : c.v_blocks; }
const HostKvCache& buffer_of(const HostFlashQCache& c, int which) { return which == 0 ? c.k_buffer : c.v_buffer; }
HostKvCache& buffer_of(HostFlashQCache& c, int which) { return which == 0 ? c.k_buffer : c.v_buffer; }
const std::vector<float>& scales_of(const HostFlashQCache& c, int which) { return which == 0 ? c.k_scale8 : c.v_scale8; }

unsigned char* buffer_row(HostFlashQCache& c, int which, int b, int h, int slot) {
  HostKvCache& buf = buffer_of(c, which);
  return buf.bytes.data() + row_offset(buf, b, h, slot);
}

// x [batch][heads][n][d], token (b, h, t).
const float* token(const std::vector<float>& x, const HostFlashQCache& c, int n, int b, int h, int t) {
  return x.data() + ((static_cast<size_t>(b) * c.heads_kv + h) * n + t) * c.d;
}

void check_tokens(const std::vector<float>& x, const HostFlashQCache& c, int n, const char* what) {
  if (n < 1 || x.size() != static_cast<size_t>(c.batch) * c.heads_kv * n * c.d)
    throw std::invalid_argument(std::string(what) + ": tokens must be [batch][heads_kv][n][d] with n >= 1");
  if (c.k_scale8.size() != static_cast<size_t>(c.heads_kv) || c.v_scale8.size() != static_cast<size_t>(c.heads_kv))
    throw std::invalid_argument(std::string(what) + ": the cache needs one universal scale per head for K and V");
}

void layout(std::vector<int>& bits_in, const std::vector<int>& bits, int d, std::vector<long long>& offsets, long long& stride) {
  bits_in = bits;
  long long page = 0;
  offsets.clear();
  for (int b : bits) {
    offsets.push_back(page);
    page += flashq_block_bytes(b, d);
  }
  if (stride == 0) stride = page;
  if (stride < page) throw std::invalid_argument("make_flashq_cache: page stride below the page's bytes");
}

// Softmax attention of one query row over the first n rows of kh/vh ([n][d] each): the library's
// row kernel itself, so this model and reference_attention agree to the last bit on equal inputs.
double attend_row(const double* qi, const std::vector<double>& kh, const std::vector<double>& vh, long long n,
                  int d, double scale, double* out) {
  return reference::attend_row(qi, kh.data(), vh.data(), n, d, d, scale, out);
}

}  // namespace

int flashq_block_bytes(int bits, int d) {
  require_block_args(bits, d);
  return kv::flashq_block_bytes(bits, d);
}

int flashq_code8(float x, float scale) {
  if (!(scale > 0.f)) return 0;
  const float q = std::rint(x / scale);
  if (std::isnan(q)) return 0;   // cvt.rni.s32.f32 of NaN
  return static_cast<int>(std::clamp(q, -127.f, 127.f));
}

float flashq_stage1(int d, const float* x, signed char* x8) {
  float amax = 0.f;
  for (int e = 0; e < kBlock * d; ++e) amax = std::max(amax, std::fabs(x[e]));
  const float alpha = amax / 127.f;
  for (int e = 0; e < kBlock * d; ++e) x8[e] = static_cast<signed char>(flashq_code8(x[e], alpha));
  return alpha;
}

void flashq_compress_block(int bits, int d, float alpha, const signed char* x8, unsigned char* block) {
  require_block_args(bits, d);
  const int levels = (1 << bits) - 1;
  std::memset(block, 0, static_cast<size_t>(kv::flashq_codes_offset(d)));
  store_f32(block, alpha);
  unsigned char* codes = block + kv::flashq_codes_offset(d);
  std::memset(codes, 0, static_cast<size_t>(kBlock) * kv::flashq_code_row_bytes(bits, d));
  for (int c = 0; c < d; ++c) {
    int mn = x8[c], mx = x8[c];
    for (int r = 1; r < kBlock; ++r) mn = std::min(mn, int(x8[r * d + c])), mx = std::max(mx, int(x8[r * d + c]));
    const int s = std::max(1, (mx - mn + levels - 1) / levels);
    block[kv::kFlashQHeaderBytes + c] = static_cast<unsigned char>(s);
    block[kv::kFlashQHeaderBytes + d + c] = static_cast<unsigned char>(static_cast<signed char>(mn));
    for (int r = 0; r < kBlock; ++r) {
      const int q = std::min(round_div(x8[r * d + c] - mn, s), levels);
      // int4: channel c in byte c/2, low nibble first; int2: byte c/4, bits 2 (c % 4).
      const int per_byte = 8 / bits;
      unsigned char& byte = codes[r * kv::flashq_code_row_bytes(bits, d) + c / per_byte];
      byte = static_cast<unsigned char>(byte | (q << (bits * (c % per_byte))));
    }
  }
}

void flashq_quantize_block(int bits, int d, const float* x, unsigned char* block) {
  std::vector<signed char> x8(static_cast<size_t>(kBlock) * d);
  const float alpha = flashq_stage1(d, x, x8.data());
  flashq_compress_block(bits, d, alpha, x8.data(), block);
}

float flashq_block_alpha(const unsigned char* block) { return load_f32(block); }
int flashq_block_step(int /*d*/, const unsigned char* block, int c) { return block[kv::kFlashQHeaderBytes + c]; }
int flashq_block_min(int d, const unsigned char* block, int c) {
  return static_cast<signed char>(block[kv::kFlashQHeaderBytes + d + c]);
}
int flashq_block_code(int bits, int d, const unsigned char* block, int r, int c) {
  require_block_args(bits, d);
  const int per_byte = 8 / bits;
  const unsigned char byte = block[kv::flashq_codes_offset(d) + r * kv::flashq_code_row_bytes(bits, d) + c / per_byte];
  return (byte >> (bits * (c % per_byte))) & ((1 << bits) - 1);
}
int flashq_block_int8(int bits, int d, const unsigned char* block, int r, int c) {
  return flashq_block_step(d, block, c) * flashq_block_code(bits, d, block, r, c) + flashq_block_min(d, block, c);
}
void flashq_dequantize_block(int bits, int d, const unsigned char* block, double* out) {
  const double alpha = flashq_block_alpha(block);
  for (int r = 0; r < kBlock; ++r)
    for (int c = 0; c < d; ++c) out[r * d + c] = alpha * flashq_block_int8(bits, d, block, r, c);
}

void flashq_quantize_buffer_row(int d, float scale, const float* x, unsigned char* row) {
  store_f32(row, scale);
  for (int e = 0; e < d; ++e) row[4 + e] = static_cast<unsigned char>(static_cast<signed char>(flashq_code8(x[e], scale)));
}

void flashq_reference_stats(const std::vector<float>& x, int batch, int heads, int n, int d, const std::vector<int>& lens,
                            std::vector<float>* mins, std::vector<float>* maxs) {
  if (x.size() != static_cast<size_t>(batch) * heads * n * d || lens.size() != static_cast<size_t>(batch))
    throw std::invalid_argument("flashq_reference_stats: x must be [batch][heads][n][d] and lens [batch]");
  mins->assign(static_cast<size_t>(heads) * d, std::numeric_limits<float>::infinity());
  maxs->assign(static_cast<size_t>(heads) * d, -std::numeric_limits<float>::infinity());
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int t = 0; t < lens[static_cast<size_t>(b)]; ++t)
        for (int c = 0; c < d; ++c) {
          const float v = x[((static_cast<size_t>(b) * heads + h) * n + t) * d + c];
          float& lo = (*mins)[static_cast<size_t>(h) * d + c];
          float& hi = (*maxs)[static_cast<size_t>(h) * d + c];
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
}

std::vector<double> flashq_reference_priority(const std::vector<float>& mins, const std::vector<float>& maxs, int heads, int d) {
  std::vector<double> out;
  for (int h = 0; h < heads; ++h) {
    std::vector<double> gaps;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (int c = 0; c < d; ++c) {
      const double mn = mins[static_cast<size_t>(h) * d + c], mx = maxs[static_cast<size_t>(h) * d + c];
      lo = std::min(lo, mn);
      hi = std::max(hi, mx);
      gaps.push_back(mx - mn);
    }
    const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / d;
    double var = 0;
    for (double g : gaps) var += (g - mean) * (g - mean);
    out.push_back((hi - lo) * std::sqrt(var / d));
  }
  return out;
}

std::vector<int> flashq_reference_bits(const std::vector<double>& priority, int n_low) {
  const int heads = static_cast<int>(priority.size());
  if (n_low < 0) n_low = heads / 2;
  std::vector<int> bits(static_cast<size_t>(heads), 4);
  // Selection by rank: head h is among the n_low lowest when fewer than n_low heads rank below it.
  for (int h = 0; h < heads; ++h) {
    int below = 0;
    for (int g = 0; g < heads; ++g)
      if (priority[static_cast<size_t>(g)] < priority[static_cast<size_t>(h)] ||
          (priority[static_cast<size_t>(g)] == priority[static_cast<size_t>(h)] && g < h))
        ++below;
    if (below < n_low) bits[static_cast<size_t>(h)] = 2;
  }
  return bits;
}

std::vector<float> flashq_reference_scales(const std::vector<float>& mins, const std::vector<float>& maxs, int heads, int d) {
  std::vector<float> out;
  for (int h = 0; h < heads; ++h) {
    float amax = 0.f;
    for (int c = 0; c < d; ++c)
      amax = std::max({amax, std::fabs(mins[static_cast<size_t>(h) * d + c]), std::fabs(maxs[static_cast<size_t>(h) * d + c])});
    out.push_back((amax > 0.f ? amax : 1.f) / 127.f);
  }
  return out;
}

std::vector<int> HostFlashQCache::head_table() const {
  std::vector<int> t;
  for (int which = 0; which < 2; ++which)
    for (int h = 0; h < heads_kv; ++h) {
      t.push_back(bits(which)[static_cast<size_t>(h)]);
      t.push_back(static_cast<int>((which == 0 ? k_head_offset : v_head_offset)[static_cast<size_t>(h)]));
    }
  return t;
}

HostFlashQCache make_flashq_cache(int d, int batch, const std::vector<int>& k_bits, const std::vector<int>& v_bits,
                                  int max_blocks, bool paged, std::uint64_t seed, long long k_page_stride,
                                  long long v_page_stride) {
  if (batch <= 0 || max_blocks <= 0 || k_bits.empty() || k_bits.size() != v_bits.size())
    throw std::invalid_argument("make_flashq_cache: batch, max_blocks and the heads' bits must be given");
  for (int b : k_bits) require_block_args(b, d);
  for (int b : v_bits) require_block_args(b, d);
  HostFlashQCache c;
  c.d = d;
  c.batch = batch;
  c.heads_kv = static_cast<int>(k_bits.size());
  c.paged = paged;
  c.max_blocks = max_blocks;
  c.k_page_stride = k_page_stride;
  c.v_page_stride = v_page_stride;
  layout(c.k_bits, k_bits, d, c.k_head_offset, c.k_page_stride);
  layout(c.v_bits, v_bits, d, c.v_head_offset, c.v_page_stride);
  const int pages = batch * max_blocks;
  if (paged) {
    c.block_table.resize(static_cast<size_t>(pages));
    std::iota(c.block_table.begin(), c.block_table.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(c.block_table.begin(), c.block_table.end(), rng);
  }
  c.k_blocks.assign(static_cast<size_t>(pages * c.k_page_stride), kKvPoison);
  c.v_blocks.assign(static_cast<size_t>(pages * c.v_page_stride), kKvPoison);
  c.k_buffer = make_contiguous(Fmt::int8, Gran::per_token, d, batch, c.heads_kv, kv::kFlashQBufferRows);
  c.v_buffer = make_contiguous(Fmt::int8, Gran::per_token, d, batch, c.heads_kv, kv::kFlashQBufferRows);
  c.k_scale8.assign(static_cast<size_t>(c.heads_kv), 1.f / 127.f);
  c.v_scale8 = c.k_scale8;
  c.compressed_lens.assign(static_cast<size_t>(batch), 0);
  c.buffer_lens.assign(static_cast<size_t>(batch), 0);
  return c;
}

long long flashq_block_offset(const HostFlashQCache& c, int which, int b, int h, int j) {
  if (b < 0 || b >= c.batch || h < 0 || h >= c.heads_kv || j < 0 || j >= c.max_blocks)
    throw std::out_of_range("flashq cache: block out of range");
  const long long page = c.paged ? c.block_table[static_cast<size_t>(b) * c.max_blocks + j] : 1LL * b * c.max_blocks + j;
  return page * (which == 0 ? c.k_page_stride : c.v_page_stride) +
         (which == 0 ? c.k_head_offset : c.v_head_offset)[static_cast<size_t>(h)];
}

void flashq_prefill(HostFlashQCache& c, const std::vector<float>& k, const std::vector<float>& v, int n,
                    const std::vector<int>& lens) {
  check_tokens(k, c, n, "flashq_prefill");
  check_tokens(v, c, n, "flashq_prefill");
  if (lens.size() != static_cast<size_t>(c.batch)) throw std::invalid_argument("flashq_prefill: lens needs one entry per sequence");
  for (int b = 0; b < c.batch; ++b) {
    const int len = lens[static_cast<size_t>(b)], blocks = len / kBlock, rest = len % kBlock;
    if (len < 0 || len > n || blocks > c.max_blocks) throw std::invalid_argument("flashq_prefill: a length does not fit");
    for (int which = 0; which < 2; ++which) {
      const std::vector<float>& x = which == 0 ? k : v;
      for (int h = 0; h < c.heads_kv; ++h) {
        for (int j = 0; j < blocks; ++j)
          flashq_quantize_block(c.bits(which)[static_cast<size_t>(h)], c.d, token(x, c, n, b, h, j * kBlock),
                                blocks_of(c, which).data() + flashq_block_offset(c, which, b, h, j));
        for (int i = 0; i < rest; ++i)
          flashq_quantize_buffer_row(c.d, scales_of(c, which)[static_cast<size_t>(h)], token(x, c, n, b, h, blocks * kBlock + i),
                                     buffer_row(c, which, b, h, i));
      }
    }
    c.compressed_lens[static_cast<size_t>(b)] = blocks * kBlock;
    c.buffer_lens[static_cast<size_t>(b)] = rest;
  }
}

void flashq_append(HostFlashQCache& c, const std::vector<float>& k, const std::vector<float>& v, int n_new) {
  check_tokens(k, c, n_new, "flashq_append");
  check_tokens(v, c, n_new, "flashq_append");
  const int rows = kv::kFlashQBufferRows, row_bytes = c.k_buffer.row_bytes();
  for (int b = 0; b < c.batch; ++b) {
    int& compressed = c.compressed_lens[static_cast<size_t>(b)];
    int& buffered = c.buffer_lens[static_cast<size_t>(b)];
    const bool flush = buffered >= kBlock && compressed / kBlock < c.max_blocks;
    const int kept = flush ? buffered - kBlock : buffered;
    for (int which = 0; which < 2; ++which)
      for (int h = 0; h < c.heads_kv; ++h) {
        const float scale = scales_of(c, which)[static_cast<size_t>(h)];
        if (flush) {
          std::vector<signed char> x8(static_cast<size_t>(kBlock) * c.d);
          for (int r = 0; r < kBlock; ++r)
            std::memcpy(&x8[static_cast<size_t>(r) * c.d], buffer_row(c, which, b, h, r) + 4, static_cast<size_t>(c.d));
          flashq_compress_block(c.bits(which)[static_cast<size_t>(h)], c.d, scale, x8.data(),
                                blocks_of(c, which).data() + flashq_block_offset(c, which, b, h, compressed / kBlock));
          for (int r = 0; r < kept; ++r)
            std::memcpy(buffer_row(c, which, b, h, r), buffer_row(c, which, b, h, kBlock + r), static_cast<size_t>(row_bytes));
        }
        for (int i = 0; i < n_new && kept + i < rows; ++i)
          flashq_quantize_buffer_row(c.d, scale, token(which == 0 ? k : v, c, n_new, b, h, i), buffer_row(c, which, b, h, kept + i));
      }
    if (flush) compressed += kBlock;
    buffered = std::min(kept + n_new, rows);
  }
}

namespace {
// Token t of (b, h) when the first `compressed` tokens are in blocks.
void read_token_at(const HostFlashQCache& c, int which, int b, int h, int t, int compressed, double* out) {
  if (t >= compressed) return read_token(buffer_of(c, which), b, h, t - compressed, out);
  const unsigned char* block = blocks_of(c, which).data() + flashq_block_offset(c, which, b, h, t / kBlock);
  const int bits = c.bits(which)[static_cast<size_t>(h)];
  const double alpha = flashq_block_alpha(block);
  for (int e = 0; e < c.d; ++e) out[e] = alpha * flashq_block_int8(bits, c.d, block, t % kBlock, e);
}
}  // namespace

void flashq_read_token(const HostFlashQCache& c, int which, int b, int h, int t, double* out) {
  const int compressed = c.compressed_lens.at(static_cast<size_t>(b));
  if (t < 0 || t >= compressed + c.buffer_lens.at(static_cast<size_t>(b))) throw std::out_of_range("flashq cache: token out of range");
  read_token_at(c, which, b, h, t, compressed, out);
}

std::vector<double> reference_decode_flashq(const std::vector<double>& q, const HostFlashQCache& c,
                                            const std::vector<int>& compressed_lens, const std::vector<int>& buffer_lens,
                                            int heads_q, int q_len, bool causal, double softmax_scale,
                                            std::vector<double>* lse) {
  if (heads_q <= 0 || heads_q % c.heads_kv != 0) throw std::invalid_argument("reference_decode_flashq: heads_q must be a positive multiple of heads_kv");
  if (q_len <= 0) throw std::invalid_argument("reference_decode_flashq: q_len must be positive");
  if (compressed_lens.size() != static_cast<size_t>(c.batch) || buffer_lens.size() != static_cast<size_t>(c.batch))
    throw std::invalid_argument("reference_decode_flashq: one compressed and one buffer length per sequence");
  if (q.size() != static_cast<size_t>(c.batch) * heads_q * q_len * c.d)
    throw std::invalid_argument("reference_decode_flashq: q must be [batch][heads_q][q_len][d]");
  for (int b = 0; b < c.batch; ++b) {
    const int cl = compressed_lens[static_cast<size_t>(b)], bl = buffer_lens[static_cast<size_t>(b)];
    if (cl < 0 || cl % kBlock != 0 || cl / kBlock > c.max_blocks || bl < 0 || bl > kv::kFlashQBufferRows)
      throw std::invalid_argument("reference_decode_flashq: lengths outside the cache");
  }
  const int d = c.d, group = heads_q / c.heads_kv;
  const double scale = softmax_scale != 0.0 ? softmax_scale : 1.0 / std::sqrt(d);
  std::vector<double> o(q.size(), 0.0);
  if (lse) lse->assign(static_cast<size_t>(c.batch) * heads_q * q_len, 0.0);
  for (int b = 0; b < c.batch; ++b) {
    const int kv_len = compressed_lens[static_cast<size_t>(b)] + buffer_lens[static_cast<size_t>(b)];
    for (int hk = 0; hk < c.heads_kv; ++hk) {
      std::vector<double> kh(static_cast<size_t>(kv_len) * d), vh(kh.size());
      for (int t = 0; t < kv_len; ++t) {
        read_token_at(c, 0, b, hk, t, compressed_lens[static_cast<size_t>(b)], &kh[static_cast<size_t>(t) * d]);
        read_token_at(c, 1, b, hk, t, compressed_lens[static_cast<size_t>(b)], &vh[static_cast<size_t>(t) * d]);
      }
      for (int hq = hk * group; hq < (hk + 1) * group; ++hq)
        for (int i = 0; i < q_len; ++i) {
          const size_t row = (static_cast<size_t>(b) * heads_q + hq) * q_len + i;
          const double l = attend_row(&q[row * d], kh, vh, visible_keys(i, q_len, kv_len, causal), d, scale, &o[row * d]);
          if (lse) (*lse)[row] = l;
        }
    }
  }
  return o;
}

}  // namespace test
}  // namespace qattn

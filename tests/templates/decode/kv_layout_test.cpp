// The host model of the KV cache (tests/common/kv_reference): row sizes, the byte layout of every
// format checked against rows parsed or built by hand here, quantization error bounds, the paged and
// contiguous addressing, and the float64 decode reference against reference_attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/common/kv_reference.hpp"
#include "tests/common/metrics.hpp"
#include "tests/common/random_data.hpp"
#include "tests/common/reference_attention.hpp"

namespace qattn {
namespace test {
namespace {

const int kDims[] = {64, 128, 256};

// ---- independent little-endian parsing of a row (not the helpers of kv_reference.cpp)
std::uint16_t u16_at(const unsigned char* p) { return static_cast<std::uint16_t>(p[0] + 256 * p[1]); }
float f32_at(const unsigned char* p) {
  const std::uint32_t bits = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
int int4_code(const unsigned char* codes, int e) { return (codes[e / 2] >> (4 * (e % 2))) & 0xF; }

// Half an ulp of x in a format with `mbits` stored mantissa bits and smallest normal exponent `emin`
// (subnormals share the quantum of emin): the largest error of a round-to-nearest conversion.
double half_ulp(double x, int mbits, int emin) {
  const int e = x == 0 ? emin : std::max(std::ilogb(x), emin);
  return std::ldexp(0.5, e - mbits);
}
double half_ulp(double x, Fmt f) { return f == Fmt::fp16 ? half_ulp(x, 10, -14) : half_ulp(x, 7, -126); }

// The code a quantizer with unit `step` and offset `shift` must write: round((x - shift) / step) in
// float64, clamped. The kernel computes it in fp32, so a value within 1e-4 of a rounding tie may go
// either way; returns -1000 (accept anything in range) there.
int expected_code(double x, double shift, double step, int lo, int hi) {
  if (step == 0) return 0;
  const double y = (x - shift) / step;
  if (std::fabs(y - std::floor(y) - 0.5) < 1e-4) return -1000;
  return std::clamp(static_cast<int>(std::nearbyint(y)), lo, hi);
}
bool code_ok(int code, int expected) { return expected == -1000 || code == expected; }

// Counts violations and keeps the first message, so a broken quantizer reports once, not per element.
struct Problems {
  long long count = 0;
  std::string first;
  template <class Describe>
  void check(bool ok, Describe describe) {
    if (ok) return;
    if (count++ == 0) first = describe();
  }
};

// Rows of K-like and V-like data (channel outliers), rounded to float: what the append kernel reads.
std::vector<float> random_rows(int rows, int d, std::uint64_t seed) {
  const Shape shape{1, 1, rows, d};
  const HostTensor k = random_tensor(shape, Layout::bhsd, k_like(), seed);
  const HostTensor v = random_tensor(shape, Layout::bhsd, v_like(Dist::uniform), seed + 1);
  std::vector<float> x;
  for (const HostTensor* t : {&k, &v})
    for (double value : t->data) x.push_back(static_cast<float>(value));
  return x;
}

std::vector<unsigned char> quantized(const KvFormat& f, int d, const float* x) {
  std::vector<unsigned char> row(static_cast<size_t>(kv_row_bytes(f.fmt, f.gran, d)), 0xA5);
  quantize_kv_row(f.fmt, f.gran, d, x, row.data());
  return row;
}

std::vector<double> dequantized(const KvFormat& f, int d, const std::vector<unsigned char>& row) {
  std::vector<double> out(static_cast<size_t>(d));
  dequantize_kv_row(f.fmt, f.gran, d, row.data(), out.data());
  return out;
}

// fp16/bf16: element e's bits at bytes 2e (low), 2e+1; within half an ulp of x.
void check_half_row(Fmt f, int d, const float* x, const unsigned char* row, const double* deq, Problems& p) {
  for (int e = 0; e < d; ++e) {
    const double stored = half_bits_to_double(u16_at(row + 2 * e), f);
    p.check(deq[e] == stored, [&] { return "element " + std::to_string(e) + " decodes to something else"; });
    p.check(std::fabs(stored - x[e]) <= half_ulp(x[e], f),
            [&] {
              return "element " + std::to_string(e) + ": " + std::to_string(x[e]) + " -> " + std::to_string(stored);
            });
  }
}

// int8: header = fp32 amax/127, codes in [-127, 127] reaching 127 at the amax element.
// Error: q = rint(y) with y = fl(x * fl(127/amax)) = (x/scale)(1 + delta), |delta| <= 3 * 2^-24, so
// |x - q*scale| <= scale/2 + scale * |x/scale| * 3 * 2^-24 <= scale/2 + |x| * 2^-21.
void check_int8_row(int d, const float* x, const unsigned char* row, const double* deq, Problems& p) {
  float amax = 0;
  for (int e = 0; e < d; ++e) amax = std::max(amax, std::fabs(x[e]));
  const float scale = f32_at(row);
  p.check(scale == amax / 127.f, [&] { return "scale " + std::to_string(scale) + " != amax/127"; });
  int max_code = 0;
  for (int e = 0; e < d; ++e) {
    const int q = static_cast<signed char>(row[4 + e]);
    max_code = std::max(max_code, std::abs(q));
    p.check(q >= -127 && q <= 127, [&] { return "code " + std::to_string(q) + " outside [-127, 127]"; });
    p.check(code_ok(q, expected_code(x[e], 0, scale, -127, 127)),
            [&] { return "element " + std::to_string(e) + " has code " + std::to_string(q); });
    p.check(deq[e] == q * static_cast<double>(scale),
            [&] { return "element " + std::to_string(e) + " decodes wrong"; });
    p.check(std::fabs(deq[e] - x[e]) <= scale / 2.0 + std::fabs(x[e]) * std::ldexp(1.0, -21),
            [&] { return "element " + std::to_string(e) + " error " + std::to_string(std::fabs(deq[e] - x[e])); });
  }
  p.check(amax == 0 || max_code == 127, [&] { return "largest code " + std::to_string(max_code) + " is not 127"; });
}

// int4, one group [begin, end) with its (scale s, shift sh) pair; r = (max - min) / 15 exactly.
// Error bound, for min <= x <= max and q = clamp(rint((x - sh) / s), 0, 15):
//   unclamped:        |x - (q s + sh)| <= s/2
//   clamped to 0:     x < sh, so the error is sh - x <= |sh - min|
//   clamped to 15:    x - sh - 15 s <= (max - min) - 15 s + (min - sh) <= 15 |s - r| + |sh - min|
//   s == 0 (constant or underflow): |x - sh| <= (max - min) + |min - sh| = 15 |s - r| + |sh - min|
// plus the fp32 evaluation of (x - sh) * fl(1/s): 3 roundings of a value below 16 move y by
// < 16 * 3 * 2^-24 codes, so s * 2^-16 covers a tie resolved the other way.
void check_int4_group(const float* x, int begin, int end, const unsigned char* pair, const unsigned char* codes,
                      const double* deq, Problems& p) {
  const float mn = *std::min_element(x + begin, x + end), mx = *std::max_element(x + begin, x + end);
  const std::uint16_t scale_bits = u16_at(pair), shift_bits = u16_at(pair + 2);
  p.check(scale_bits == to_fp16_bits((mx - mn) / 15.f), [&] { return "scale is not fp16((max - min) / 15)"; });
  p.check(shift_bits == to_fp16_bits(mn), [&] { return "shift is not fp16(min)"; });
  const double s = fp16_bits_to_double(scale_bits), sh = fp16_bits_to_double(shift_bits);
  const double r = (static_cast<double>(mx) - mn) / 15;
  const double bound = 0.5 * s + 15 * std::fabs(s - r) + std::fabs(sh - mn) + s * std::ldexp(1.0, -16);
  int lo = 15, hi = 0;
  for (int e = begin; e < end; ++e) {
    const int q = int4_code(codes, e);
    lo = std::min(lo, q), hi = std::max(hi, q);
    p.check(code_ok(q, expected_code(x[e], sh, s, 0, 15)),
            [&] { return "element " + std::to_string(e) + " has code " + std::to_string(q) + " (fp16 scale/shift)"; });
    p.check(deq[e] == q * s + sh, [&] { return "element " + std::to_string(e) + " decodes wrong"; });
    p.check(std::fabs(deq[e] - x[e]) <= bound + 1e-12 * std::fabs(x[e]),
            [&] { return "element " + std::to_string(e) + " error " + std::to_string(std::fabs(deq[e] - x[e])); });
  }
  // A group whose |min| is small next to its range uses the whole code range.
  p.check(s == 0 || (lo == 0 && hi == 15),
          [&] { return "codes span [" + std::to_string(lo) + ", " + std::to_string(hi) + "], not [0, 15]"; });
}

void check_int4_row(Gran g, int d, const float* x, const unsigned char* row, const double* deq, Problems& p) {
  const int groups = g == Gran::per_group ? 4 : 1, per_group = d / groups;
  const unsigned char* codes = row + 4 * groups;
  for (int gi = 0; gi < groups; ++gi)
    check_int4_group(x, gi * per_group, (gi + 1) * per_group, row + 4 * gi, codes, deq, p);
}

void check_row(const KvFormat& f, int d, const float* x, const std::vector<unsigned char>& row,
               const std::vector<double>& deq, Problems& p) {
  for (double v : deq) p.check(std::isfinite(v), [] { return std::string("non-finite dequantized value"); });
  if (f.fmt == Fmt::int8) return check_int8_row(d, x, row.data(), deq.data(), p);
  if (f.fmt == Fmt::int4) return check_int4_row(f.gran, d, x, row.data(), deq.data(), p);
  check_half_row(f.fmt, d, x, row.data(), deq.data(), p);
}

TEST(KvLayout, RowBytes) {
  struct Want {
    int d, int4_token, int4_group, int8, half;
  };
  for (const Want& w : {Want{64, 36, 48, 68, 128}, Want{128, 68, 80, 132, 256}, Want{256, 132, 144, 260, 512}}) {
    SCOPED_TRACE("d=" + std::to_string(w.d));
    EXPECT_EQ(kv_row_bytes(Fmt::int4, Gran::per_token, w.d), w.int4_token);
    EXPECT_EQ(kv_row_bytes(Fmt::int4, Gran::per_group, w.d), w.int4_group);
    EXPECT_EQ(kv_row_bytes(Fmt::int8, Gran::per_token, w.d), w.int8);
    EXPECT_EQ(kv_row_bytes(Fmt::fp16, Gran::none, w.d), w.half);
    EXPECT_EQ(kv_row_bytes(Fmt::bf16, Gran::none, w.d), w.half);
    // The kernels copy 16-byte units of 4 rows: every row is a 4-byte multiple.
    for (const KvFormat& f : all_kv_formats()) EXPECT_EQ(kv_row_bytes(f.fmt, f.gran, w.d) % 4, 0);
  }
  EXPECT_THROW(kv_row_bytes(Fmt::int8, Gran::per_group, 128), std::invalid_argument);
  EXPECT_THROW(kv_row_bytes(Fmt::fp16, Gran::per_token, 128), std::invalid_argument);
}

TEST(KvLayout, RoundTripWithinQuantizationBound) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const int rows = 48;
  for (int d : kDims) {
    const std::vector<float> x = random_rows(rows, d, seed + d);
    for (const KvFormat& f : all_kv_formats()) {
      SCOPED_TRACE(kv_format_name(f.fmt, f.gran) + " d=" + std::to_string(d));
      Problems p;
      for (size_t at = 0; at < x.size(); at += d) {
        const std::vector<unsigned char> row = quantized(f, d, &x[at]);
        check_row(f, d, &x[at], row, dequantized(f, d, row), p);
      }
      EXPECT_EQ(p.count, 0) << p.first;
    }
  }
}

// The row of element e = code e % 16 with scale 1 and shift 0, built byte by byte from the layout.
std::vector<unsigned char> hand_built_int4_row(Gran g, int d) {
  const int groups = g == Gran::per_group ? 4 : 1;
  std::vector<unsigned char> row;
  for (int gi = 0; gi < groups; ++gi) row.insert(row.end(), {0x00, 0x3C, 0x00, 0x00});   // fp16 1.0, fp16 0.0
  const unsigned char pairs[8] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE};      // low nibble = even e
  for (int i = 0; i < d / 2; ++i) row.push_back(pairs[i % 8]);
  return row;
}

TEST(KvLayout, Int4NibbleOrderIsLowNibbleFirst) {
  for (Gran g : {Gran::per_token, Gran::per_group})
    for (int d : kDims) {
      const KvFormat f{Fmt::int4, g};
      SCOPED_TRACE(kv_format_name(f.fmt, g) + " d=" + std::to_string(d));
      const std::vector<unsigned char> row = hand_built_int4_row(g, d);
      ASSERT_EQ(row.size(), static_cast<size_t>(kv_row_bytes(f.fmt, g, d)));
      const std::vector<double> deq = dequantized(f, d, row);
      for (int e = 0; e < d; ++e) ASSERT_EQ(deq[e], e % 16) << "element " << e;
      // Every group holds 0..15 (d/4 >= 16), so the quantizer finds scale 1, shift 0: the same bytes.
      std::vector<float> x(static_cast<size_t>(d));
      for (int e = 0; e < d; ++e) x[e] = static_cast<float>(e % 16);
      EXPECT_EQ(quantized(f, d, x.data()), row);
    }
}

TEST(KvLayout, Int4GroupHeadersAreFourBytesApart) {
  const int d = 64;
  // Group g: scale 2^g, shift -g; every code 3. Element e of group g decodes to 3 * 2^g - g.
  std::vector<unsigned char> row = {0x00, 0x3C, 0x00, 0x00,  0x00, 0x40, 0x00, 0xBC,
                                    0x00, 0x44, 0x00, 0xC0,  0x00, 0x48, 0x00, 0xC2};
  row.insert(row.end(), d / 2, 0x33);
  const std::vector<double> deq = dequantized({Fmt::int4, Gran::per_group}, d, row);
  for (int e = 0; e < d; ++e) {
    const int g = e / (d / 4);
    EXPECT_EQ(deq[e], 3.0 * (1 << g) - g) << "element " << e;
  }
}

TEST(KvLayout, Int8AndHalfRowsDecodeByHand) {
  const int d = 64;
  // int8: fp32 0.5 little endian, then signed codes spread over [-127, 127].
  std::vector<unsigned char> int8_row = {0x00, 0x00, 0x00, 0x3F};
  for (int e = 0; e < d; ++e) int8_row.push_back(static_cast<unsigned char>((e * 37) % 255 - 127));
  const std::vector<double> int8_deq = dequantized({Fmt::int8, Gran::per_token}, d, int8_row);
  for (int e = 0; e < d; ++e) EXPECT_EQ(int8_deq[e], 0.5 * ((e * 37) % 255 - 127)) << "element " << e;

  // fp16 bits 0x3C00 + e are 1 + e/1024, bf16 bits 0x3F80 + e are 1 + e/128 (low byte first).
  struct Half {
    Fmt fmt;
    int one_bits;
    double quantum;
  };
  for (const Half& h : {Half{Fmt::fp16, 0x3C00, 1.0 / 1024}, Half{Fmt::bf16, 0x3F80, 1.0 / 128}}) {
    std::vector<unsigned char> row;
    for (int e = 0; e < d; ++e) row.insert(row.end(), {static_cast<unsigned char>((h.one_bits + e) & 0xFF),
                                                        static_cast<unsigned char>((h.one_bits + e) >> 8)});
    const std::vector<double> deq = dequantized({h.fmt, Gran::none}, d, row);
    for (int e = 0; e < d; ++e) EXPECT_EQ(deq[e], 1 + e * h.quantum) << kv_format_name(h.fmt, Gran::none) << " " << e;
    std::vector<float> x(deq.begin(), deq.end());
    EXPECT_EQ(quantized({h.fmt, Gran::none}, d, x.data()), row);
  }
}

TEST(KvLayout, ConstantAndZeroRowsStayFinite) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const int d = 128;
  for (const KvFormat& f : all_kv_formats()) {
    SCOPED_TRACE(kv_format_name(f.fmt, f.gran));
    for (float c : {0.f, 3.7f, -1234.5f}) {
      SCOPED_TRACE("constant " + std::to_string(c));
      const std::vector<float> x(static_cast<size_t>(d), c);
      const std::vector<unsigned char> row = quantized(f, d, x.data());
      const std::vector<double> deq = dequantized(f, d, row);
      Problems p;
      check_row(f, d, x.data(), row, deq, p);
      EXPECT_EQ(p.count, 0) << p.first;
      // int4 decodes to fp16(c) and int8 to 127 * fl(|c|/127), within 2^-21 |c|: fp16's half ulp bounds
      // all but bf16, which has its own.
      const double tolerance = half_ulp(c, f.fmt == Fmt::bf16 ? Fmt::bf16 : Fmt::fp16);
      for (int e = 0; e < d; ++e) ASSERT_LE(std::fabs(deq[e] - c), tolerance) << "element " << e;
      if (f.fmt == Fmt::int4) {
        for (int i = 0; i < d / 2; ++i) ASSERT_EQ(row[kv::header_bytes(f.fmt, f.gran) + i], 0) << "code byte " << i;
      }
      if (c == 0.f) {
        for (unsigned char byte : row) ASSERT_EQ(byte, 0) << "a zero row is all zero bytes";
        for (double v : deq) ASSERT_EQ(v, 0.0);
      }
    }
  }
  // One constant group among random ones: only that group gets scale 0.
  std::vector<float> x = random_rows(1, d, seed);
  x.resize(static_cast<size_t>(d));
  std::fill(x.begin() + 2 * d / 4, x.begin() + 3 * d / 4, 2.5f);
  const KvFormat grouped{Fmt::int4, Gran::per_group};
  const std::vector<unsigned char> row = quantized(grouped, d, x.data());
  Problems p;
  check_row(grouped, d, x.data(), row, dequantized(grouped, d, row), p);
  EXPECT_EQ(p.count, 0) << p.first;
  for (int g = 0; g < 4; ++g) EXPECT_EQ(u16_at(&row[4 * g]) == 0, g == 2) << "scale of group " << g;
}

// Writes token t of x [batch][heads][tokens][d] into the cache.
void write_from(HostKvCache& c, const HostTensor& x, int b, int h, int t) {
  std::vector<float> row(static_cast<size_t>(c.d));
  for (int e = 0; e < c.d; ++e) row[e] = static_cast<float>(x.at(b, h, t, e));
  write_token(c, b, h, t, row.data());
}

std::vector<double> read_row(const HostKvCache& c, int b, int h, int t) {
  std::vector<double> out(static_cast<size_t>(c.d));
  read_token(c, b, h, t, out.data());
  return out;
}

// Every row lies inside the buffer and no two rows overlap.
void expect_rows_disjoint_and_in_bounds(const HostKvCache& c) {
  std::set<long long> starts;
  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < c.heads_kv; ++h)
      for (int t = 0; t < c.capacity; ++t) {
        const long long at = row_offset(c, b, h, t);
        ASSERT_GE(at, 0);
        ASSERT_LE(at + c.row_bytes(), static_cast<long long>(c.bytes.size()));
        ASSERT_EQ(at % c.row_bytes(), 0) << "rows sit on the row grid";
        ASSERT_TRUE(starts.insert(at).second) << "row (" << b << ", " << h << ", " << t << ") overlaps another";
      }
  EXPECT_THROW(row_offset(c, 0, 0, c.capacity), std::out_of_range);
}

TEST(KvLayout, PagedAndContiguousCachesHoldTheSameRows) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const int d = 64, batch = 3, heads = 2, page_size = 8, pages_per_seq = 4, capacity = page_size * pages_per_seq;
  const std::vector<int> written = {capacity, 13, 20};   // tokens written per sequence; the rest stays poison
  const HostTensor x = random_tensor(Shape{batch, heads, capacity, d}, Layout::bhsd, k_like(), seed);
  for (const KvFormat& f : all_kv_formats()) {
    SCOPED_TRACE(kv_format_name(f.fmt, f.gran));
    HostKvCache flat = make_contiguous(f.fmt, f.gran, d, batch, heads, capacity);
    HostKvCache paged = make_paged(f.fmt, f.gran, d, batch, heads, page_size, pages_per_seq, seed);
    ASSERT_EQ(paged.capacity, capacity);
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h)
        for (int t = 0; t < written[b]; ++t) write_from(flat, x, b, h, t), write_from(paged, x, b, h, t);
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h)
        for (int t = 0; t < capacity; ++t) {
          const std::vector<double> a = read_row(flat, b, h, t), p = read_row(paged, b, h, t);
          if (t < written[b]) {
            ASSERT_EQ(a, p) << "token (" << b << ", " << h << ", " << t << ")";
            ASSERT_EQ(std::memcmp(&flat.bytes[row_offset(flat, b, h, t)], &paged.bytes[row_offset(paged, b, h, t)],
                                  flat.row_bytes()), 0);
          } else {
            ASSERT_TRUE(std::isnan(a[0]) && std::isnan(p[0])) << "an unwritten row must read as NaN (poison)";
          }
        }
    expect_rows_disjoint_and_in_bounds(flat);
    expect_rows_disjoint_and_in_bounds(paged);
  }
  // The block table is a permutation of the pages (so sequences share none), scattered across the pool.
  const HostKvCache paged = make_paged(Fmt::fp16, Gran::none, d, batch, heads, page_size, pages_per_seq, seed);
  ASSERT_EQ(paged.table_stride, pages_per_seq);
  std::vector<int> sorted = paged.block_table, identity(static_cast<size_t>(batch * pages_per_seq));
  std::iota(identity.begin(), identity.end(), 0);
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(paged.block_table, identity) << "pages are not scattered";
  EXPECT_EQ(paged.bytes.size(), static_cast<size_t>(batch * pages_per_seq * paged.page_stride));
}

// Caches of random K-like and V-like tokens 0..kv_lens[b]-1; the rows past kv_lens stay poison (NaN),
// so a reference that read them would produce NaN.
struct DecodeCase {
  HostKvCache k, v;
  std::vector<double> q;   // [batch][heads_q][q_len][d]
};

DecodeCase make_decode_case(const KvFormat& f, int d, int heads_q, int heads_kv, int q_len,
                            const std::vector<int>& kv_lens, int capacity, bool paged, std::uint64_t seed) {
  const int batch = static_cast<int>(kv_lens.size());
  auto make = [&] {
    return paged ? make_paged(f.fmt, f.gran, d, batch, heads_kv, 4, (capacity + 3) / 4, seed)
                 : make_contiguous(f.fmt, f.gran, d, batch, heads_kv, capacity);
  };
  DecodeCase c{make(), make(), random_tensor(Shape{batch, heads_q, q_len, d}, Layout::bhsd, q_like(), seed).data};
  const Shape kv_shape{batch, heads_kv, capacity, d};
  const HostTensor k = random_tensor(kv_shape, Layout::bhsd, k_like(), seed + 1);
  const HostTensor v = random_tensor(kv_shape, Layout::bhsd, v_like(), seed + 2);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads_kv; ++h)
      for (int t = 0; t < kv_lens[b]; ++t) write_from(c.k, k, b, h, t), write_from(c.v, v, b, h, t);
  return c;
}

TEST(KvReferenceDecode, OneTokenGivesItsValueRow) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const int d = 64, heads_q = 4, heads_kv = 2, batch = 2;
  const double scale = 0.2;
  for (const KvFormat& f : all_kv_formats()) {
    SCOPED_TRACE(kv_format_name(f.fmt, f.gran));
    const DecodeCase c = make_decode_case(f, d, heads_q, heads_kv, 1, {1, 1}, 8, true, seed);
    std::vector<double> lse;
    const std::vector<double> o = reference_decode(c.q, c.k, c.v, {1, 1}, heads_q, 1, true, scale, &lse);
    for (int b = 0; b < batch; ++b)
      for (int hq = 0; hq < heads_q; ++hq) {
        const int hk = hq / (heads_q / heads_kv);
        const std::vector<double> k = read_row(c.k, b, hk, 0), v = read_row(c.v, b, hk, 0);
        const size_t row = static_cast<size_t>(b) * heads_q + hq;
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += c.q[row * d + e] * k[e];
        EXPECT_EQ(std::vector<double>(o.begin() + row * d, o.begin() + (row + 1) * d), v) << "b=" << b << " hq=" << hq;
        EXPECT_NEAR(lse[row], scale * dot, 1e-12 * (1 + std::fabs(scale * dot))) << "b=" << b << " hq=" << hq;
      }
  }
}

// The dequantized K or V cache of sequence b as a [1, heads_kv, kv_len, d] tensor.
HostTensor cache_tensor(const HostKvCache& c, int b, int kv_len) {
  HostTensor t = HostTensor::zeros(Shape{1, c.heads_kv, kv_len, c.d});
  for (int h = 0; h < c.heads_kv; ++h)
    for (int s = 0; s < kv_len; ++s) {
      const std::vector<double> row = read_row(c, b, h, s);
      for (int e = 0; e < c.d; ++e) t.at(0, h, s, e) = row[e];
    }
  return t;
}

HostTensor query_tensor(const std::vector<double>& q, int b, int heads_q, int q_len, int d) {
  HostTensor t = HostTensor::zeros(Shape{1, heads_q, q_len, d});
  const size_t per_seq = static_cast<size_t>(heads_q) * q_len * d;
  std::copy(q.begin() + b * per_seq, q.begin() + (b + 1) * per_seq, t.data.begin());   // both [h][s][d]
  return t;
}

void expect_lse_equal(double want, double got, const std::string& where) {
  if (std::isinf(want)) {
    EXPECT_EQ(got, want) << where;
  } else {
    EXPECT_NEAR(got, want, 1e-12 * (1 + std::fabs(want))) << where;
  }
}

TEST(KvReferenceDecode, MatchesReferenceAttentionOnTheDequantizedCache) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const int d = 64, heads_q = 8, heads_kv = 2, q_len = 3, capacity = 40;   // GQA 4
  const std::vector<int> kv_lens = {1, 17, 40};   // sequence 0 has fewer tokens than queries
  for (const KvFormat& f : all_kv_formats()) {
    const DecodeCase c = make_decode_case(f, d, heads_q, heads_kv, q_len, kv_lens, capacity, false, seed);
    for (bool causal : {false, true})
      for (double scale : {0.0, 0.3}) {   // 0: the default 1/sqrt(d)
        SCOPED_TRACE(kv_format_name(f.fmt, f.gran) + (causal ? " causal" : "") + " scale=" + std::to_string(scale));
        std::vector<double> lse;
        const std::vector<double> o = reference_decode(c.q, c.k, c.v, kv_lens, heads_q, q_len, causal, scale, &lse);
        const size_t per_seq = static_cast<size_t>(heads_q) * q_len;
        for (int b = 0; b < static_cast<int>(kv_lens.size()); ++b) {
          std::vector<double> want_lse;
          const AttentionConfig config{causal, scale != 0 ? scale : 1 / std::sqrt(static_cast<double>(d))};
          const HostTensor want = reference_attention(query_tensor(c.q, b, heads_q, q_len, d),
                                                      cache_tensor(c.k, b, kv_lens[b]),
                                                      cache_tensor(c.v, b, kv_lens[b]), config, &want_lse);
          const std::vector<double> got(o.begin() + b * per_seq * d, o.begin() + (b + 1) * per_seq * d);
          const ErrorMetrics m = compare(want.logical(), got);
          EXPECT_EQ(m.nonfinite, 0) << "b=" << b;
          EXPECT_LE(m.rel_l2, 1e-12) << "b=" << b << " " << m.report();
          for (size_t r = 0; r < per_seq; ++r)
            expect_lse_equal(want_lse[r], lse[b * per_seq + r],
                             "lse b=" + std::to_string(b) + " row " + std::to_string(r));
        }
        // Causal: query 0 of sequence 0 (1 token, 3 queries) sees nothing: output 0, LSE -inf.
        if (causal) {
          EXPECT_EQ(lse[0], -INFINITY);
          for (int e = 0; e < d; ++e) ASSERT_EQ(o[e], 0.0);
        }
      }
  }
}

}  // namespace
}  // namespace test
}  // namespace qattn

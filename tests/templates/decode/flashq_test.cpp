// The FlashQ KV cache on the CPU: the library's layout helpers and head-bit choice
// (include/qattn/flashq.hpp), the host model (tests/common/flashq_reference) against the byte layout of
// kv_layout.h (parsed here by hand), its quantization bounds, the flush model, the runtime calls'
// bad-input checks, and the pack kernels compiled by NVRTC for sm_80, sm_89 and sm_90a.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "qattn/decode/kv_layout.h"
#include "qattn/error.hpp"
#include "qattn/flashq.hpp"
#include "generator/render.hpp"
#include "generator/render_helpers.hpp"
#include "qattn/runtime.hpp"
#include "runtime/jit/nvrtc_compiler.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/common/flashq_reference.hpp"
#include "tests/common/metrics.hpp"
#include "tests/common/random_data.hpp"
#include "tests/common/reference_attention.hpp"

namespace qattn {
namespace test {
namespace {

constexpr int kB = kv::kFlashQBlock;
const int kDims[] = {64, 128, 256};

float f32_at(const unsigned char* p) {
  const std::uint32_t bits = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// A block of 64 x d values like real K: N(0, 1) with a few channels offset by +-[5, 20] and scaled.
std::vector<float> random_block(int d, std::mt19937_64& rng, double spread = 1.0) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> offset(5.f, 20.f);
  std::vector<float> bias(static_cast<size_t>(d), 0.f);
  for (int i = 0; i < 4; ++i) bias[rng() % d] = (rng() % 2 ? 1.f : -1.f) * offset(rng);
  std::vector<float> x(static_cast<size_t>(kB) * d);
  for (int r = 0; r < kB; ++r)
    for (int c = 0; c < d; ++c)
      x[static_cast<size_t>(r) * d + c] = static_cast<float>(fp16_bits_to_double(to_fp16_bits(spread * normal(rng) + bias[c])));
  return x;
}

std::vector<float> random_tokens(size_t count, std::mt19937_64& rng, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<float> x(count);
  for (float& v : x) v = static_cast<float>(fp16_bits_to_double(to_fp16_bits(normal(rng))));
  return x;
}

// ---- layout

TEST(FlashQLayout, BlockAndPageBytes) {
  // d = 128: header 16 + s_c 128 + m_c 128, then 64 rows of 64 (int4) or 32 (int2) bytes.
  EXPECT_EQ(kv::flashq_block_bytes(4, 128), 16 + 256 + 64 * 64);
  EXPECT_EQ(kv::flashq_block_bytes(2, 128), 16 + 256 + 64 * 32);
  const FlashQLayout l = flashq_layout(128, {4, 2, 4});
  EXPECT_EQ(l.block_bytes, (std::vector<long long>{4368, 2320, 4368}));
  EXPECT_EQ(l.head_offset, (std::vector<long long>{0, 4368, 6688}));
  EXPECT_EQ(l.page_bytes, 11056);
  EXPECT_EQ(flashq_max_page_bytes(128, 3), 3 * 4368);
  const FlashQLayout v = flashq_layout(128, {2, 2, 4});
  EXPECT_EQ(flashq_head_table(l, v), (std::vector<int>{4, 0, 2, 4368, 4, 6688, 2, 0, 2, 2320, 4, 4640}));
  EXPECT_EQ(flashq_buffer_row_bytes(128), 132);
  EXPECT_EQ(flashq_buffer_head_stride(128), 80 * 132);
  EXPECT_EQ(flashq_buffer_bytes(128, 3, 8), 3LL * 8 * 80 * 132);
  EXPECT_EQ(kv::kFlashQBufferRows, 80);   // 64 + the most new tokens of one step (16)
}

TEST(FlashQLayout, EveryOffsetIs16ByteAlignedAndMatchesTheHostModel) {
  std::mt19937_64 rng(7);
  for (int d : kDims)
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<int> kb(1 + rng() % 9), vb(kb.size());
      for (int& b : kb) b = rng() % 2 ? 4 : 2;
      for (int& b : vb) b = rng() % 2 ? 4 : 2;
      const FlashQLayout kl = flashq_layout(d, kb), vl = flashq_layout(d, vb);
      for (size_t h = 0; h < kb.size(); ++h) {
        EXPECT_EQ(kl.block_bytes[h] % 16, 0);
        EXPECT_EQ(kl.head_offset[h] % 16, 0);
        EXPECT_EQ(kl.block_bytes[h], flashq_block_bytes(kb[h], d));
        EXPECT_EQ(kv::flashq_codes_offset(d) % 16, 0);
      }
      const HostFlashQCache c = make_flashq_cache(d, 2, kb, vb, 3, trial % 2 == 1, 11);
      EXPECT_EQ(c.k_page_stride, kl.page_bytes);
      EXPECT_EQ(c.v_page_stride, vl.page_bytes);
      EXPECT_EQ(c.k_head_offset, kl.head_offset);
      EXPECT_EQ(c.head_table(), flashq_head_table(kl, vl));
      EXPECT_EQ(c.k_buffer.head_stride, flashq_buffer_head_stride(d));
      EXPECT_EQ(static_cast<long long>(c.k_buffer.bytes.size()), flashq_buffer_bytes(d, 2, static_cast<int>(kb.size())));
      EXPECT_EQ(c.k_buffer.head_stride % 16, 0);
    }
}

TEST(FlashQLayout, RefusesBadBitsAndDims) {
  expect_bad_input([] { flashq_layout(128, {4, 3}); }, "accepted: 2, 4");
  expect_bad_input([] { flashq_layout(96, {4}); }, "accepted: 64, 128, 256");
  expect_bad_input([] { flashq_layout(128, {}); }, "bit width");
}

// ---- one block

TEST(FlashQBlock, RoundTripBoundsAndCodeRanges) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (int d : kDims)
    for (int bits : {4, 2})
      for (int trial = 0; trial < 8; ++trial) {
        SCOPED_TRACE("d=" + std::to_string(d) + " bits=" + std::to_string(bits));
        const std::vector<float> x = random_block(d, rng, trial % 2 ? 1.0 : 1e-3);
        std::vector<unsigned char> block(static_cast<size_t>(flashq_block_bytes(bits, d)));
        std::vector<signed char> x8(x.size());
        const float alpha = flashq_stage1(d, x.data(), x8.data());
        flashq_quantize_block(bits, d, x.data(), block.data());
        float amax = 0.f;
        for (float v : x) amax = std::max(amax, std::fabs(v));
        ASSERT_EQ(f32_at(block.data()), amax / 127.f);
        ASSERT_EQ(alpha, amax / 127.f);
        for (int i = 4; i < 16; ++i) ASSERT_EQ(block[static_cast<size_t>(i)], 0) << "header pad byte " << i;
        long long bad = 0;
        for (int r = 0; r < kB; ++r)
          for (int c = 0; c < d; ++c) {
            const size_t e = static_cast<size_t>(r) * d + c;
            // stage 1: |x - alpha x8| <= alpha / 2 (with the fp32 rounding of x / alpha)
            bad += std::fabs(double(x[e]) - double(alpha) * x8[e]) > 0.5 * alpha * (1 + 1e-5);
            bad += x8[e] == -128;
            // stage 2: codes in range, |x8 - (s code + m)| <= s / 2
            const int s = flashq_block_step(d, block.data(), c), m = flashq_block_min(d, block.data(), c);
            const int code = flashq_block_code(bits, d, block.data(), r, c);
            bad += code < 0 || code > (1 << bits) - 1;
            bad += s < 1 || s > 255 || m < -127 || m > 127;
            bad += 2 * std::abs(x8[e] - (s * code + m)) > s;
          }
        EXPECT_EQ(bad, 0);
        std::vector<double> out(x.size());
        flashq_dequantize_block(bits, d, block.data(), out.data());
        for (size_t e = 0; e < out.size(); ++e)
          ASSERT_EQ(out[e], double(alpha) * flashq_block_int8(bits, d, block.data(), int(e) / d, int(e) % d));
      }
}

TEST(FlashQBlock, ConstantChannelsAndZeroBlocks) {
  for (int bits : {4, 2}) {
    const int d = 64;
    std::vector<float> x(static_cast<size_t>(kB) * d);
    for (int r = 0; r < kB; ++r)
      for (int c = 0; c < d; ++c) x[static_cast<size_t>(r) * d + c] = c == 0 ? 3.f : c == 1 ? -2.f : (r % 3) - 1.f;
    std::vector<unsigned char> block(static_cast<size_t>(flashq_block_bytes(bits, d)));
    flashq_quantize_block(bits, d, x.data(), block.data());
    const float alpha = 3.f / 127.f;
    for (int c : {0, 1}) {   // constant channels: s = 1, m = the value, codes 0, decoded exactly
      EXPECT_EQ(flashq_block_step(d, block.data(), c), 1);
      EXPECT_EQ(flashq_block_min(d, block.data(), c), c == 0 ? 127 : flashq_code8(-2.f, alpha));
      for (int r = 0; r < kB; ++r) EXPECT_EQ(flashq_block_code(bits, d, block.data(), r, c), 0);
    }
    std::fill(x.begin(), x.end(), 0.f);
    flashq_quantize_block(bits, d, x.data(), block.data());
    EXPECT_EQ(f32_at(block.data()), 0.f);
    std::vector<double> out(x.size(), -1);
    flashq_dequantize_block(bits, d, block.data(), out.data());
    for (double v : out) ASSERT_EQ(v, 0.0);   // no NaN from alpha 0
    // -0 everywhere behaves like 0.
    std::fill(x.begin(), x.end(), -0.f);
    flashq_quantize_block(bits, d, x.data(), block.data());
    EXPECT_EQ(flashq_block_step(d, block.data(), 5), 1);
    EXPECT_EQ(flashq_block_min(d, block.data(), 5), 0);
  }
}

// Every INT8 channel range [mn, mx] and every value in it: stage 2 is exact integer arithmetic.
// s code + m is an integer (exact in fp16) with |x8 - (s code + m)| <= s / 2, so the decoded value can
// pass 127: INT4 reaches 135 (mn = -120, mx = 127: s = 17, rint(247 / 17) = 15, -120 + 255) and INT2
// 129 (mn = -126, mx = 127: s = 85, code 3). A decode kernel must not squeeze it into int8.
TEST(FlashQBlock, StageTwoIsExactOverEveryInt8Range) {
  for (int bits : {4, 2}) {
    const int levels = (1 << bits) - 1;
    int lo = 1000, hi = -1000, worst = 0;
    std::vector<signed char> x8(static_cast<size_t>(kB) * 32);
    std::vector<unsigned char> block(static_cast<size_t>(flashq_block_bytes(bits, 32)));
    for (int mn = -127; mn <= 127; ++mn)
      for (int mx = mn; mx <= 127; ++mx) {
        // channel c holds min, max and then values stepping through [mn, mx]
        for (int c = 0; c < 32; ++c)
          for (int r = 0; r < kB; ++r)
            x8[static_cast<size_t>(r) * 32 + c] =
                static_cast<signed char>(r == 0 ? mn : r == 1 ? mx : mn + ((r - 2) * 32 + c) % (mx - mn + 1));
        flashq_compress_block(bits, 32, 1.f, x8.data(), block.data());
        for (int c = 0; c < 32; ++c) {
          const int s = flashq_block_step(32, block.data(), c);
          ASSERT_EQ(s, std::max(1, (mx - mn + levels - 1) / levels));
          ASSERT_EQ(flashq_block_min(32, block.data(), c), mn);
          for (int r = 0; r < kB; ++r) {
            const int v = flashq_block_int8(bits, 32, block.data(), r, c);
            const int x = x8[static_cast<size_t>(r) * 32 + c];
            ASSERT_LE(2 * std::abs(x - v), s) << "mn " << mn << " mx " << mx << " x " << x;
            ASSERT_EQ(fp16_bits_to_double(to_fp16_bits(v)), double(v));
            lo = std::min(lo, v);
            hi = std::max(hi, v);
            worst = std::max(worst, std::abs(x - v));
          }
        }
      }
    EXPECT_EQ(lo, -127);
    EXPECT_EQ(hi, bits == 4 ? 135 : 129);
    EXPECT_EQ(worst, bits == 4 ? 8 : 42);   // floor(s / 2) for the largest step, 17 and 85
    std::printf("[ flashq   ] int%d stage 2: decoded INT8 in [%d, %d], max |x8 - decoded| = %d\n", bits, lo, hi, worst);
  }
}

// Codes are token-major; int4 puts channel e in byte e/2, low nibble first; int2 in byte e/4 at bits
// 2 (e % 4). Channels with min 0 and max 2^bits - 1 have s = 1, m = 0, so the codes are the values.
TEST(FlashQBlock, NibbleAndCrumbOrderAreExact) {
  for (int bits : {4, 2})
    for (int d : kDims) {
      const int levels = (1 << bits) - 1;
      std::vector<signed char> x8(static_cast<size_t>(kB) * d);
      for (int r = 0; r < kB; ++r)
        for (int c = 0; c < d; ++c)
          x8[static_cast<size_t>(r) * d + c] = static_cast<signed char>(r == 0 ? 0 : r == 1 ? levels : (r * 7 + c * 3) % (levels + 1));
      std::vector<unsigned char> block(static_cast<size_t>(flashq_block_bytes(bits, d)));
      flashq_compress_block(bits, d, 0.5f, x8.data(), block.data());
      EXPECT_EQ(f32_at(block.data()), 0.5f);
      const unsigned char* codes = block.data() + 16 + 2 * d;
      const int row = d * bits / 8;
      for (int r = 0; r < kB; ++r)
        for (int c = 0; c < d; ++c) {
          ASSERT_EQ(block[static_cast<size_t>(16 + c)], 1);
          ASSERT_EQ(block[static_cast<size_t>(16 + d + c)], 0);
          const unsigned char byte = bits == 4 ? codes[r * row + c / 2] : codes[r * row + c / 4];
          const int got = bits == 4 ? (c % 2 == 0 ? byte & 0xF : byte >> 4) : (byte >> (2 * (c % 4))) & 3;
          ASSERT_EQ(got, x8[static_cast<size_t>(r) * d + c]) << "bits " << bits << " d " << d << " r " << r << " c " << c;
        }
      EXPECT_EQ(static_cast<long long>(block.size()), 16 + 2 * d + kB * row);
    }
}

TEST(FlashQBlock, RoundingTiesGoToEven) {
  // INT4 over [0, 30]: s = 2, so odd values are ties: 1 -> 0, 3 -> 2 (code 2 / 2 = 1... ), rint(k + .5) even.
  const int d = 32;
  std::vector<signed char> x8(static_cast<size_t>(kB) * d, 0);
  for (int c = 0; c < d; ++c) x8[static_cast<size_t>(d) + c] = 30;
  for (int c = 0; c < d; ++c) x8[static_cast<size_t>(2 * d) + c] = static_cast<signed char>(c % 31);
  std::vector<unsigned char> block(static_cast<size_t>(flashq_block_bytes(4, d)));
  flashq_compress_block(4, d, 1.f, x8.data(), block.data());
  for (int c = 0; c < d; ++c) {
    ASSERT_EQ(flashq_block_step(d, block.data(), c), 2);
    const int v = c % 31, expect = static_cast<int>(std::nearbyint(v / 2.0));   // FE_TONEAREST: half to even
    EXPECT_EQ(flashq_block_code(4, d, block.data(), 2, c), expect) << v;
  }
}

// ---- head-wise mixed precision

FlashQChannelStats stats_of(int heads, int d, const std::vector<float>& mins, const std::vector<float>& maxs) {
  FlashQChannelStats s;
  s.heads_kv = heads;
  s.d = d;
  s.min = mins;
  s.max = maxs;
  return s;
}

TEST(FlashQHeads, PriorityIsGapTimesSigmaOfTheChannelGaps) {
  // Channel gaps 1 and 3 (sigma 1), the head's range [-2, 1] (gap 3): priority 3.
  const FlashQChannelStats s = stats_of(1, 2, {-0.5f, -2.f}, {0.5f, 1.f});
  EXPECT_DOUBLE_EQ(flashq_priority(s)[0], 3.0 * 1.0);
}

TEST(FlashQHeads, LargerGapTimesSigmaGetsFourBits) {
  // 8 heads with known ranges: head h has channel gaps alternating a_h and 3 a_h (sigma a_h) over the
  // range [-2 a_h, a_h] (gap 3 a_h): priority 3 a_h^2. a_h is a permutation, so the ranking is known.
  const int heads = 8, d = 16;
  const float a[heads] = {3, 1, 7, 5, 2, 8, 4, 6};
  std::vector<float> mins, maxs;
  for (int h = 0; h < heads; ++h)
    for (int c = 0; c < d; ++c) {
      mins.push_back(c % 2 ? -2 * a[h] : -0.5f * a[h]);
      maxs.push_back(c % 2 ? a[h] : 0.5f * a[h]);
    }
  const FlashQChannelStats s = stats_of(heads, d, mins, maxs);
  const std::vector<double> p = flashq_priority(s);
  for (int h = 0; h < heads; ++h) EXPECT_DOUBLE_EQ(p[static_cast<size_t>(h)], 3.0 * a[h] * a[h]);
  for (int n_low = 0; n_low <= heads; ++n_low) {
    const std::vector<int> bits = flashq_choose_bits(p, n_low);
    EXPECT_EQ(std::count(bits.begin(), bits.end(), 2), n_low);
    EXPECT_EQ(std::count(bits.begin(), bits.end(), 4), heads - n_low);
    for (int h = 0; h < heads; ++h) EXPECT_EQ(bits[static_cast<size_t>(h)], a[h] <= n_low ? 2 : 4) << "n_low " << n_low << " head " << h;
    EXPECT_EQ(bits, flashq_reference_bits(p, n_low));
  }
  EXPECT_EQ(flashq_choose_bits(p), (std::vector<int>{2, 2, 4, 4, 2, 4, 2, 4}));   // default: half
  const FlashQHeads both = flashq_choose_heads(s, stats_of(heads, d, maxs, maxs), 3);
  EXPECT_EQ(both.k_bits, flashq_choose_bits(p, 3));
  EXPECT_EQ(both.v_bits, (std::vector<int>{2, 2, 2, 4, 4, 4, 4, 4}));   // all priorities 0: ties by index
}

TEST(FlashQHeads, TiesGoByHeadIndex) {
  const std::vector<double> p = {1, 0, 1, 0, 1, 2};
  EXPECT_EQ(flashq_choose_bits(p, 1), (std::vector<int>{4, 2, 4, 4, 4, 4}));
  EXPECT_EQ(flashq_choose_bits(p, 2), (std::vector<int>{4, 2, 4, 2, 4, 4}));
  EXPECT_EQ(flashq_choose_bits(p, 3), (std::vector<int>{2, 2, 4, 2, 4, 4}));
  EXPECT_EQ(flashq_choose_bits(p, 4), (std::vector<int>{2, 2, 2, 2, 4, 4}));
  for (int n = 0; n <= 6; ++n) EXPECT_EQ(flashq_choose_bits(p, n), flashq_reference_bits(p, n));
  expect_bad_input([&] { flashq_choose_bits(p, 7); }, "n_low");
  expect_bad_input([&] { flashq_choose_bits(p, -2); }, "n_low");
}

TEST(FlashQHeads, LibraryAgreesWithTheReferenceOnRandomStatistics) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 50; ++trial) {
    const int heads = 1 + static_cast<int>(rng() % 16), d = 64, batch = 2, n = 70;
    std::vector<float> x = random_tokens(static_cast<size_t>(batch) * heads * n * d, rng, 1 + rng() % 5);
    std::vector<int> lens = {static_cast<int>(1 + rng() % n), static_cast<int>(rng() % (n + 1))};
    std::vector<float> mins, maxs;
    flashq_reference_stats(x, batch, heads, n, d, lens, &mins, &maxs);
    const FlashQChannelStats s = stats_of(heads, d, mins, maxs);
    const std::vector<double> p = flashq_priority(s);
    EXPECT_EQ(p, flashq_reference_priority(mins, maxs, heads, d));
    const int n_low = static_cast<int>(rng() % (heads + 1));
    EXPECT_EQ(flashq_choose_bits(p, n_low), flashq_reference_bits(p, n_low));
    EXPECT_EQ(flashq_universal_scales(s), flashq_reference_scales(mins, maxs, heads, d));
  }
}

TEST(FlashQHeads, UniversalScaleIsAbsmaxOver127) {
  const FlashQChannelStats s = stats_of(3, 2, {-3.f, 1.f, 0.f, 0.f, -0.5f, -0.25f}, {2.f, 1.5f, 0.f, 0.f, 0.f, 0.f});
  EXPECT_EQ(flashq_universal_scales(s), (std::vector<float>{3.f / 127.f, 1.f / 127.f, 0.5f / 127.f}));
}

// ---- the cache model: prefill, append, flush

HostFlashQCache small_cache(int d, int max_blocks, bool paged) {
  HostFlashQCache c = make_flashq_cache(d, 2, {4, 2}, {2, 4}, max_blocks, paged, 5);
  c.k_scale8 = {0.05f, 0.02f};
  c.v_scale8 = {0.03f, 0.04f};
  return c;
}

TEST(FlashQModel, PrefillWritesBlocksAndTheRemainder) {
  std::mt19937_64 rng(3);
  for (bool paged : {false, true}) {
    const int d = 64, n = 150;
    HostFlashQCache c = small_cache(d, 3, paged);
    const std::vector<float> k = random_tokens(static_cast<size_t>(2) * 2 * n * d, rng), v = random_tokens(k.size(), rng);
    flashq_prefill(c, k, v, n, {150, 64});
    EXPECT_EQ(c.compressed_lens, (std::vector<int>{128, 64}));
    EXPECT_EQ(c.buffer_lens, (std::vector<int>{22, 0}));
    // Block 1 of (b 0, h 1) of V is the quantized tokens 64..127.
    std::vector<unsigned char> expect(static_cast<size_t>(flashq_block_bytes(4, d)));
    flashq_quantize_block(4, d, &v[((0 * 2 + 1) * static_cast<size_t>(n) + 64) * d], expect.data());
    EXPECT_EQ(0, std::memcmp(expect.data(), c.v_blocks.data() + flashq_block_offset(c, 1, 0, 1, 1), expect.size()));
    // Buffer row 5 of (b 0, h 0) of K: token 133 with the universal scale.
    std::vector<unsigned char> row(static_cast<size_t>(4 + d));
    flashq_quantize_buffer_row(d, 0.05f, &k[(0 * static_cast<size_t>(n) + 133) * d], row.data());
    EXPECT_EQ(0, std::memcmp(row.data(), c.k_buffer.bytes.data() + row_offset(c.k_buffer, 0, 0, 5), row.size()));
    EXPECT_EQ(f32_at(row.data()), 0.05f);
    // Block 2 of sequence 0 and block 1 of sequence 1 were not written.
    const long long off = flashq_block_offset(c, 0, 0, 0, 2);
    for (int i = 0; i < flashq_block_bytes(4, d); ++i) ASSERT_EQ(c.k_blocks[static_cast<size_t>(off + i)], kKvPoison);
  }
}

TEST(FlashQModel, FlushAfterSixtyFourSteps) {
  std::mt19937_64 rng(9);
  const int d = 128;
  HostFlashQCache c = small_cache(d, 2, false);
  const std::vector<unsigned char> k_blocks0 = c.k_blocks, v_blocks0 = c.v_blocks;
  std::vector<std::vector<float>> ks, vs;
  for (int step = 0; step < 64; ++step) {
    ks.push_back(random_tokens(static_cast<size_t>(2) * 2 * d, rng, 0.5));
    vs.push_back(random_tokens(ks.back().size(), rng, 0.5));
    flashq_append(c, ks.back(), vs.back(), 1);
    if (step == 62) {
      EXPECT_EQ(c.compressed_lens, (std::vector<int>{0, 0}));   // after 63 steps nothing is compressed
      EXPECT_EQ(c.buffer_lens, (std::vector<int>{63, 63}));
      EXPECT_EQ(c.k_blocks, k_blocks0);
      EXPECT_EQ(c.v_blocks, v_blocks0);
    }
  }
  EXPECT_EQ(c.buffer_lens, (std::vector<int>{64, 64}));   // the 64th row is in; the flush comes with the next step
  EXPECT_EQ(c.k_blocks, k_blocks0);
  const std::vector<float> k65 = random_tokens(static_cast<size_t>(2) * 2 * d, rng), v65 = random_tokens(k65.size(), rng);
  flashq_append(c, k65, v65, 1);
  EXPECT_EQ(c.compressed_lens, (std::vector<int>{64, 64}));
  EXPECT_EQ(c.buffer_lens, (std::vector<int>{1, 1}));
  // The block equals a from-scratch compression of the 64 tokens (stage 1 with alpha = the universal scale).
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 2; ++h)
      for (int which = 0; which < 2; ++which) {
        const float scale = (which == 0 ? c.k_scale8 : c.v_scale8)[static_cast<size_t>(h)];
        std::vector<signed char> x8(static_cast<size_t>(kB) * d);
        for (int t = 0; t < kB; ++t)
          for (int e = 0; e < d; ++e)
            x8[static_cast<size_t>(t) * d + e] = static_cast<signed char>(
                flashq_code8((which == 0 ? ks : vs)[static_cast<size_t>(t)][(static_cast<size_t>(b) * 2 + h) * d + e], scale));
        const int bits = c.bits(which)[static_cast<size_t>(h)];
        std::vector<unsigned char> expect(static_cast<size_t>(flashq_block_bytes(bits, d)));
        flashq_compress_block(bits, d, scale, x8.data(), expect.data());
        const std::vector<unsigned char>& blocks = which == 0 ? c.k_blocks : c.v_blocks;
        EXPECT_EQ(0, std::memcmp(expect.data(), blocks.data() + flashq_block_offset(c, which, b, h, 0), expect.size()));
        // The 65th token is buffer row 0; the token reads back from the buffer.
        std::vector<double> got(static_cast<size_t>(d));
        flashq_read_token(c, which, b, h, 64, got.data());
        for (int e = 0; e < d; ++e)
          ASSERT_EQ(got[static_cast<size_t>(e)],
                    double(scale) * flashq_code8((which == 0 ? k65 : v65)[(static_cast<size_t>(b) * 2 + h) * d + e], scale));
      }
}

TEST(FlashQModel, ClampedOutlierLeavesEarlierTokensAlone) {
  std::mt19937_64 rng(12);
  const int d = 64;
  HostFlashQCache c = small_cache(d, 2, true);
  for (int step = 0; step < 10; ++step) {
    const std::vector<float> x = random_tokens(static_cast<size_t>(2) * 2 * 3 * d, rng, 0.5);
    flashq_append(c, x, x, 3);
  }
  const HostFlashQCache before = c;
  std::vector<float> big(static_cast<size_t>(2) * 2 * d, 1000.f);
  for (size_t i = 0; i < big.size(); i += 2) big[i] = -1000.f;
  flashq_append(c, big, big, 1);
  EXPECT_EQ(c.buffer_lens, (std::vector<int>{31, 31}));
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 2; ++h) {
      const long long row = row_offset(c.k_buffer, b, h, 0);
      EXPECT_EQ(0, std::memcmp(c.k_buffer.bytes.data() + row, before.k_buffer.bytes.data() + row, 30 * static_cast<size_t>(4 + d)));
      std::vector<double> out(static_cast<size_t>(d));
      flashq_read_token(c, 0, b, h, 30, out.data());
      for (int e = 0; e < d; ++e)   // clamped to +-127 scale
        ASSERT_EQ(out[static_cast<size_t>(e)], (e % 2 ? 127.0 : -127.0) * double(c.k_scale8[static_cast<size_t>(h)]));
    }
}

TEST(FlashQModel, RaggedStepsNeverOverflowTheBuffer) {
  std::mt19937_64 rng(4);
  const int d = 64;
  HostFlashQCache c = small_cache(d, 4, false);
  const std::vector<float> k0 = random_tokens(static_cast<size_t>(2) * 2 * 100 * d, rng);
  flashq_prefill(c, k0, k0, 100, {63, 100});
  int total[2] = {63, 100};
  for (int step = 0; step < 40; ++step) {
    const int n_new = 1 + static_cast<int>(rng() % 16);
    const std::vector<float> x = random_tokens(static_cast<size_t>(2) * 2 * n_new * d, rng);
    const std::vector<int> buffered = c.buffer_lens;
    flashq_append(c, x, x, n_new);
    for (int b = 0; b < 2; ++b) {
      const bool full = c.compressed_lens[static_cast<size_t>(b)] / kB >= 4;
      if (!full) {
        total[b] += n_new;
        EXPECT_EQ(c.compressed_lens[static_cast<size_t>(b)] + c.buffer_lens[static_cast<size_t>(b)], total[b]);
        EXPECT_EQ(c.buffer_lens[static_cast<size_t>(b)], (buffered[static_cast<size_t>(b)] >= 64 ? buffered[static_cast<size_t>(b)] - 64 : buffered[static_cast<size_t>(b)]) + n_new);
      }
      EXPECT_LE(c.buffer_lens[static_cast<size_t>(b)], kv::kFlashQBufferRows);
      EXPECT_EQ(c.compressed_lens[static_cast<size_t>(b)] % kB, 0);
      EXPECT_LE(c.compressed_lens[static_cast<size_t>(b)], 4 * kB);
    }
  }
  // Out of blocks: the buffer fills to its capacity and stays there.
  EXPECT_EQ(c.compressed_lens, (std::vector<int>{256, 256}));
  EXPECT_EQ(c.buffer_lens, (std::vector<int>{80, 80}));
}

TEST(FlashQModel, DecodeReferenceReadsBlocksThenTheBuffer) {
  std::mt19937_64 rng(21);
  const int d = 128, heads_q = 4, q_len = 3, n = 200;
  HostFlashQCache c = make_flashq_cache(d, 2, {4, 4}, {4, 4}, 4, false, 1);
  std::vector<float> k = random_tokens(static_cast<size_t>(2) * 2 * n * d, rng), v = random_tokens(k.size(), rng);
  std::vector<float> mins, maxs;
  flashq_reference_stats(k, 2, 2, n, d, {200, 40}, &mins, &maxs);
  c.k_scale8 = flashq_reference_scales(mins, maxs, 2, d);
  flashq_reference_stats(v, 2, 2, n, d, {200, 40}, &mins, &maxs);
  c.v_scale8 = flashq_reference_scales(mins, maxs, 2, d);
  flashq_prefill(c, k, v, n, {200, 40});
  const std::vector<float> qf = random_tokens(static_cast<size_t>(2) * heads_q * q_len * d, rng);
  const std::vector<double> q(qf.begin(), qf.end());
  for (bool causal : {false, true}) {
    std::vector<double> lse, ref_lse;
    const std::vector<double> o = reference_decode_flashq(q, c, c.compressed_lens, c.buffer_lens, heads_q, q_len, causal, 0.0, &lse);
    // Exact attention over the unquantized tokens: close (INT4 per channel), not equal.
    std::vector<double> exact(o.size());
    for (int b = 0; b < 2; ++b)
      for (int hq = 0; hq < heads_q; ++hq)
        for (int i = 0; i < q_len; ++i) {
          const int len = b == 0 ? 200 : 40, hk = hq / 2;
          const long long vis = visible_keys(i, q_len, len, causal);
          const size_t row = (static_cast<size_t>(b) * heads_q + hq) * q_len + i;
          std::vector<double> s(static_cast<size_t>(vis));
          double mx = -1e300, sum = 0;
          for (long long t = 0; t < vis; ++t) {
            double dot = 0;
            for (int e = 0; e < d; ++e) dot += q[row * d + e] * k[((static_cast<size_t>(b) * 2 + hk) * n + t) * d + e];
            s[static_cast<size_t>(t)] = dot / std::sqrt(double(d));
            mx = std::max(mx, s[static_cast<size_t>(t)]);
          }
          for (long long t = 0; t < vis; ++t) {
            const double p = std::exp(s[static_cast<size_t>(t)] - mx);
            sum += p;
            for (int e = 0; e < d; ++e) exact[row * d + e] += p * v[((static_cast<size_t>(b) * 2 + hk) * n + t) * d + e];
          }
          for (int e = 0; e < d; ++e) exact[row * d + e] /= sum;
          EXPECT_NEAR(lse[row], mx + std::log(sum), 0.1);
        }
    const ErrorMetrics m = compare(exact, o);
    EXPECT_GE(m.cosine, 0.99) << m.report();
  }
  // All tokens in the buffer: the int8:per_token reference over the buffer caches, bit for bit.
  HostFlashQCache only_buffer = make_flashq_cache(d, 2, {2, 2}, {2, 4}, 1, false, 1);
  only_buffer.k_scale8 = c.k_scale8;
  only_buffer.v_scale8 = c.v_scale8;
  flashq_prefill(only_buffer, k, v, n, {63, 17});
  std::vector<double> l1, l2;
  const std::vector<double> a = reference_decode_flashq(q, only_buffer, only_buffer.compressed_lens, only_buffer.buffer_lens,
                                                        heads_q, q_len, true, 0.0, &l1);
  HostKvCache kb = only_buffer.k_buffer, vb = only_buffer.v_buffer;
  const std::vector<double> bref = reference_decode(q, kb, vb, {63, 17}, heads_q, q_len, true, 0.0, &l2);
  EXPECT_EQ(a, bref);
  EXPECT_EQ(l1, l2);
}

// ---- runtime calls: every bad input is refused before the GPU is touched

void* fake(std::uintptr_t at) { return reinterpret_cast<void*>(at); }

FlashQCacheView fake_view() {
  FlashQCacheView v;
  v.k_blocks = fake(0x100000);
  v.v_blocks = fake(0x200000);
  v.k_buffer = fake(0x300000);
  v.v_buffer = fake(0x400000);
  v.heads = static_cast<int*>(fake(0x500000));
  v.compressed_lens = static_cast<int*>(fake(0x500100));
  v.buffer_lens = static_cast<int*>(fake(0x500200));
  v.k_scale8 = static_cast<float*>(fake(0x500300));
  v.v_scale8 = static_cast<float*>(fake(0x500400));
  v.max_blocks = 4;
  v.bits = FlashQHeads{{4, 2}, {2, 2}};
  return v;
}

TEST(FlashQCalls, BadInputIsRefusedWithOneLine) {
  RuntimeOptions o;
  o.use_cache = false;
  Runtime rt(o);
  const Spec spec = parse_spec("decode qk=flashq:per_channel pv=flashq:per_channel out=bf16 d=128");
  auto append = [&] {
    FlashQAppendCall a;
    a.spec = spec;
    a.batch = 2;
    a.heads_kv = 2;
    a.n_new = 1;
    a.k = fake(0x600000);
    a.v = fake(0x700000);
    a.cache = fake_view();
    return a;
  };
  auto prefill = [&] {
    FlashQPrefillCall p;
    p.spec = spec;
    p.batch = 2;
    p.heads_kv = 2;
    p.n = 100;
    p.k = fake(0x600000);
    p.v = fake(0x700000);
    p.cache = fake_view();
    return p;
  };
  auto run_append = [&](const FlashQAppendCall& a) { rt.flashq_append(a, nullptr); };
  auto run_prefill = [&](const FlashQPrefillCall& p) { rt.flashq_prefill(p, nullptr); };
  {
    FlashQAppendCall a = append();
    a.spec = parse_spec("decode qk=int8:per_token pv=int8:per_token out=bf16 d=128");
    expect_bad_input([&] { run_append(a); }, "flashq:per_channel");
  }
  for (int n_new : {0, 17}) {
    FlashQAppendCall a = append();
    a.n_new = n_new;
    expect_bad_input([&] { run_append(a); }, "n_new");
  }
  {
    FlashQAppendCall a = append();
    a.k = nullptr;
    expect_bad_input([&] { run_append(a); }, "k is null");
    a = append();
    a.cache.v_buffer = nullptr;
    expect_bad_input([&] { run_append(a); }, "null");
    a = append();
    a.cache.buffer_lens = nullptr;
    expect_bad_input([&] { run_append(a); }, "null");
    a = append();
    a.cache.k_blocks = fake(0x100008);
    expect_bad_input([&] { run_append(a); }, "16-byte aligned");
    a = append();
    a.cache.k_scale8 = static_cast<float*>(fake(0x500302));
    expect_bad_input([&] { run_append(a); }, "4-byte aligned");
    a = append();
    a.v = fake(0x700001);
    expect_bad_input([&] { run_append(a); }, "2-byte aligned");
    a = append();
    a.cache.bits.k_bits = {4, 3};
    expect_bad_input([&] { run_append(a); }, "accepted: 2, 4");
    a = append();
    a.cache.bits.v_bits = {4};
    expect_bad_input([&] { run_append(a); }, "one entry per KV head");
    a = append();
    a.cache.k_page_stride = 1000;
    expect_bad_input([&] { run_append(a); }, "k_page_stride");
    a = append();
    a.cache.buffer_head_stride = 16;
    expect_bad_input([&] { run_append(a); }, "buffer strides");
    a = append();
    a.cache.max_blocks = 0;
    expect_bad_input([&] { run_append(a); }, "max_blocks");
    a = append();
    a.spec = parse_spec("decode qk=flashq:per_channel pv=flashq:per_channel out=bf16 d=128 paged");
    expect_bad_input([&] { run_append(a); }, "block_table");
  }
  {
    FlashQPrefillCall p = prefill();
    p.lens = {100, 101};
    expect_bad_input([&] { run_prefill(p); }, "lens");
    p = prefill();
    p.lens = {1};
    expect_bad_input([&] { run_prefill(p); }, "one entry per sequence");
    p = prefill();
    p.n = 4097;
    p.lens = {4097, 5};
    expect_bad_input([&] { run_prefill(p); }, "64 blocks; the cache holds 4");
    p = prefill();
    p.k_scale8 = {1.f, 0.f};
    expect_bad_input([&] { run_prefill(p); }, "k_scale8");
    p = prefill();
    p.n_low = 3;
    expect_bad_input([&] { run_prefill(p); }, "n_low");
    p = prefill();
    p.n = 0;
    expect_bad_input([&] { run_prefill(p); }, "n = 0");
    p = prefill();
    p.lens = {0, 0};
    p.cache.bits = {};
    expect_bad_input([&] { run_prefill(p); }, "no prefill tokens");
  }
}

// ---- render and compile

TEST(FlashQKernels, NamesAndRefusals) {
  const Spec s = parse_spec("decode qk=flashq:per_channel pv=flashq:per_channel out=bf16 d=128 gqa=4 causal paged arch=sm_90a");
  std::vector<std::string> names;
  for (const gen::Source& src : gen::render_flashq_kernels(s)) names.push_back(src.kernel_name);
  EXPECT_EQ(names, (std::vector<std::string>{"qattn_flashq_bf16_d128__stats", "qattn_flashq_bf16_d128_paged__prefill",
                                             "qattn_flashq_bf16_d128_paged__append", "qattn_flashq__lens"}));
  EXPECT_EQ(gen::render_flashq_append(parse_spec("decode qk=flashq:per_channel pv=flashq:per_channel out=fp16 d=64")).kernel_name,
            "qattn_flashq_f16_d64__append");
  expect_bad_input([] { gen::render_flashq_append(parse_spec("decode qk=int4:per_token pv=int4:per_token out=fp16 d=64")); },
                   "flashq");
}

TEST(FlashQKernels, CompileForEveryArchWithoutSpills) {
  std::vector<gen::Source> sources;
  std::set<std::string> seen;
  for (const char* arch : {"sm_80", "sm_89", "sm_90a"})
    for (int d : kDims)
      for (const char* out : {"fp16", "bf16"})
        for (bool paged : {false, true}) {
          if (d != 128 && std::string(out) == "fp16") continue;   // the input type only changes the loads
          const Spec s = parse_spec(std::string("decode qk=flashq:per_channel pv=flashq:per_channel out=") + out +
                                    " d=" + std::to_string(d) + (paged ? " paged" : "") + " arch=" + arch);
          for (gen::Source& src : gen::render_flashq_kernels(s))
            if (seen.insert(src.kernel_name + "@" + arch).second) sources.push_back(src);
        }
  std::vector<rt::CompileResult> results(sources.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < std::max(1u, std::thread::hardware_concurrency()); ++w)
    pool.emplace_back([&] {
      for (size_t i = next++; i < sources.size(); i = next++) {
        rt::CompileRequest r;
        r.source = sources[i].text;
        r.program_name = sources[i].kernel_name + ".cu";
        r.arch = to_string(sources[i].arch);
        r.extra_options = sources[i].options;
        results[i] = rt::compile(r);
      }
    });
  for (std::thread& t : pool) t.join();
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string what = sources[i].kernel_name + " " + to_string(sources[i].arch);
    ASSERT_TRUE(results[i].ok) << what << "\n" << results[i].log;
    EXPECT_GT(results[i].registers, 0) << what;
    EXPECT_LE(results[i].registers, 128) << what;   // 128-thread CTAs: plenty of room
    EXPECT_LE(results[i].spill_store_bytes, 0) << what << "\n" << results[i].log;
    EXPECT_EQ(results[i].stack_bytes, 0) << what;
  }
  std::printf("[ compiled ] %zu flashq kernels\n", sources.size());
}

}  // namespace
}  // namespace test
}  // namespace qattn

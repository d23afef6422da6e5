// fp16/bf16 host conversion: exact round-to-nearest-even from float64, checked on hand-picked ties,
// the double-rounding traps of going through float, and every bit pattern.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/common/random_data.hpp"

namespace qattn {
namespace test {
namespace {

TEST(HalfConversion, Fp16KnownValues) {
  EXPECT_EQ(to_fp16_bits(1.0), 0x3c00);
  EXPECT_EQ(to_fp16_bits(-2.0), 0xc000);
  EXPECT_EQ(to_fp16_bits(65504.0), 0x7bff);                 // largest finite
  EXPECT_EQ(to_fp16_bits(65519.0), 0x7bff);                 // below the tie with 65536
  EXPECT_EQ(to_fp16_bits(65520.0), 0x7c00);                 // tie rounds to even = overflow
  EXPECT_EQ(to_fp16_bits(std::ldexp(1.0, -24)), 0x0001);    // smallest subnormal
  EXPECT_EQ(to_fp16_bits(std::ldexp(1.0, -25)), 0x0000);    // tie with 0: even
  EXPECT_EQ(to_fp16_bits(std::ldexp(3.0, -26)), 0x0001);    // above the tie
  EXPECT_EQ(to_fp16_bits(std::ldexp(1.0, -14)), 0x0400);    // smallest normal
  EXPECT_EQ(to_fp16_bits(1.0 + std::ldexp(1.0, -11)), 0x3c00);   // tie: even
  EXPECT_EQ(to_fp16_bits(1.0 + std::ldexp(3.0, -11)), 0x3c02);   // tie: even
  // Through float, the 2^-40 would vanish and leave a tie rounded down; exactly, it is above the tie.
  EXPECT_EQ(to_fp16_bits(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3c01);
  EXPECT_EQ(to_fp16_bits(std::nan("")), kFp16NaN);
  EXPECT_EQ(to_fp16_bits(-INFINITY), 0xfc00);
  EXPECT_EQ(to_fp16_bits(-0.0), 0x8000);
  EXPECT_EQ(fp16_bits_to_double(0x3555), 0.333251953125);
}

TEST(HalfConversion, Bf16KnownValues) {
  EXPECT_EQ(to_bf16_bits(1.0), 0x3f80);
  EXPECT_EQ(to_bf16_bits(1.0 + std::ldexp(1.0, -8)), 0x3f80);   // tie: even
  EXPECT_EQ(to_bf16_bits(1.0 + std::ldexp(3.0, -8)), 0x3f82);   // tie: even
  EXPECT_EQ(to_bf16_bits(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)), 0x3f81);   // float would lose 2^-30
  EXPECT_EQ(to_bf16_bits(std::ldexp(1.0, -133)), 0x0001);       // smallest subnormal
  EXPECT_EQ(to_bf16_bits(std::ldexp(255.0, 120)), 0x7f7f);      // largest finite
  EXPECT_EQ(to_bf16_bits(std::ldexp(511.0, 119)), 0x7f80);      // tie above the largest: overflow
  EXPECT_EQ(to_bf16_bits(-3.0), 0xc040);
  EXPECT_EQ(to_bf16_bits(std::nan("")), kBf16NaN);
}

TEST(HalfConversion, EveryBitPatternRoundTrips) {
  for (Fmt fmt : {Fmt::fp16, Fmt::bf16}) {
    long long bad = 0, nans = 0;
    for (unsigned bits = 0; bits < 65536; ++bits) {
      const double v = half_bits_to_double(static_cast<std::uint16_t>(bits), fmt);
      if (std::isnan(v)) {
        ++nans;
        continue;
      }
      bad += to_half_bits(v, fmt) != bits;
    }
    EXPECT_EQ(bad, 0) << (fmt == Fmt::fp16 ? "fp16" : "bf16");
    EXPECT_EQ(nans, fmt == Fmt::fp16 ? 2 * 1023 : 2 * 127);
  }
}

TEST(HalfConversion, RoundToAndEncodeKeepLayout) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  HostTensor t = random_tensor(Shape{2, 3, 5, 8}, Layout::bshd, q_like(), seed);
  const HostTensor original = t;
  round_to(t, Fmt::bf16);
  long long changed = 0;
  for (size_t i = 0; i < t.data.size(); ++i) {
    changed += t.data[i] != original.data[i];
    EXPECT_LE(std::fabs(t.data[i] - original.data[i]), std::ldexp(std::fabs(original.data[i]), -8));
  }
  EXPECT_GT(changed, 0);
  const std::vector<std::uint16_t> storage = encode(t, Fmt::bf16);
  ASSERT_EQ(storage.size(), t.data.size());
  const HostTensor back = decode(storage.data(), t.shape, t.strides, Fmt::bf16);
  EXPECT_EQ(back.data, t.data);
  EXPECT_EQ(storage[t.offset(1, 2, 3, 4)], to_bf16_bits(t.at(1, 2, 3, 4)));
}

TEST(HalfConversion, PoisonFills) {
  std::vector<std::uint16_t> h(5, 0);
  fill_nan(h, Fmt::fp16);
  for (auto v : h) EXPECT_TRUE(std::isnan(fp16_bits_to_double(v)));
  fill_nan(h, Fmt::bf16);
  for (auto v : h) EXPECT_TRUE(std::isnan(bf16_bits_to_double(v)));
  std::vector<float> f(3, 1.f);
  fill_nan(f);
  for (float v : f) EXPECT_TRUE(std::isnan(v));
  std::vector<std::int8_t> codes(4, 1);
  fill_poison(codes);
  for (auto c : codes) EXPECT_EQ(c, -128);
}

}  // namespace
}  // namespace test
}  // namespace qattn

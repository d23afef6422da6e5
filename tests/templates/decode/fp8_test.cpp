// The fp8e4m3:per_head KV cache's element format (templates/qattn/decode/fp8_e4m3.h): the encoder is
// round-to-nearest-even onto the e4m3 grid with saturation at 448, the decoder exact, and the register
// decode the kernels use (kv_dequant.cuh: bytes shifted into fp16 fields, 2^-8 times the value) agrees
// with it for every code. Also the host cache model's fp8 rows with a per-head scale.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "qattn/decode/fp8_e4m3.h"
#include "tests/common/kv_reference.hpp"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace {

std::vector<float> normal_floats(size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

bool is_nan_code(int c) { return (c & 0x7F) == 0x7F; }

// The non-negative finite e4m3 values, ascending (codes 0x00 .. 0x7E).
std::vector<double> grid() {
  std::vector<double> g;
  for (int c = 0; c < 0x7F; ++c) g.push_back(fp8::decode_e4m3(static_cast<unsigned char>(c)));
  return g;
}

// Nearest grid value by brute force in float64, ties to the even code; saturating at 448.
int nearest_code(double x) {
  const std::vector<double> g = grid();
  const double a = std::min(std::fabs(x), 448.0);
  int best = 0;
  for (int c = 1; c < static_cast<int>(g.size()); ++c) {
    const double dc = std::fabs(g[c] - a), db = std::fabs(g[best] - a);
    if (dc < db || (dc == db && c % 2 == 0)) best = c;
  }
  return (std::signbit(x) ? 0x80 : 0) | best;
}

// What the kernels' register decode (e4m3_bytes13_to_half2) computes, as fp16 bits: sign kept,
// exponent and mantissa moved down one bit.
std::uint16_t kernel_half_bits(unsigned char c) {
  const std::uint32_t t = static_cast<std::uint32_t>(c) << 8;
  return static_cast<std::uint16_t>((t & 0x8000u) | ((t >> 1) & 0x3F80u));
}

double half_bits_value(std::uint16_t h) {
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -mag : mag;
}

TEST(Fp8E4m3, EveryCodeRoundTripsAndDecodesAsTheKernelDoes) {
  for (int c = 0; c < 256; ++c) {
    if (is_nan_code(c)) continue;
    const float v = fp8::decode_e4m3(static_cast<unsigned char>(c));
    EXPECT_EQ(fp8::encode_e4m3(v), c) << "code " << c << " value " << v;
    EXPECT_EQ(half_bits_value(kernel_half_bits(static_cast<unsigned char>(c))) * 256.0, static_cast<double>(v))
        << "code " << c;
  }
  EXPECT_EQ(fp8::decode_e4m3(0x7E), 448.f);
  EXPECT_EQ(fp8::decode_e4m3(0x01), std::ldexp(1.f, -9));   // smallest subnormal
  EXPECT_EQ(fp8::decode_e4m3(0x08), std::ldexp(1.f, -6));   // smallest normal
}

TEST(Fp8E4m3, RoundsToNearestEvenAndSaturates) {
  // Midpoints between neighbours go to the even code; points just off them go to the nearer one.
  const std::vector<double> g = grid();
  for (size_t c = 0; c + 1 < g.size(); ++c) {
    const double mid = (g[c] + g[c + 1]) / 2;
    const int even = static_cast<int>(c % 2 == 0 ? c : c + 1);
    EXPECT_EQ(fp8::encode_e4m3(static_cast<float>(mid)), even) << "midpoint above code " << c;
    EXPECT_EQ(fp8::encode_e4m3(std::nextafter(static_cast<float>(mid), 0.f)), static_cast<int>(c));
    EXPECT_EQ(fp8::encode_e4m3(std::nextafter(static_cast<float>(mid), 1e9f)), static_cast<int>(c + 1));
    EXPECT_EQ(fp8::encode_e4m3(static_cast<float>(-mid)), 0x80 | even);
  }
  for (float big : {448.f, 449.f, 464.f, 500.f, 1e30f, std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(fp8::encode_e4m3(big), 0x7E) << big;
    EXPECT_EQ(fp8::encode_e4m3(-big), 0xFE) << big;
  }
  EXPECT_EQ(fp8::encode_e4m3(0.f), 0x00);
  EXPECT_EQ(fp8::encode_e4m3(-0.f), 0x80);
  EXPECT_EQ(fp8::encode_e4m3(std::ldexp(1.f, -11)), 0x00);   // below half the smallest subnormal
}

TEST(Fp8E4m3, MatchesBruteForceNearestOnRandomValues) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  std::vector<float> x = normal_floats(20000, seed);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(x[i], static_cast<int>(i % 24) - 12);   // 2^-12 .. 2^11
  for (float v : x) ASSERT_EQ(fp8::encode_e4m3(v), nearest_code(v)) << v;
}

TEST(Fp8E4m3, HostRowsWithAHeadScaleStayWithinHalfASpacing) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  const int d = 128, tokens = 64, heads = 2;
  std::vector<float> x = normal_floats(static_cast<size_t>(heads) * tokens * d, seed);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= (i / (tokens * d) == 0 ? 3.f : 0.02f) * (i % d == 5 ? 20.f : 1.f);
  const std::vector<float> scales = test::fp8_head_scales(x, heads, tokens, d);
  std::vector<unsigned char> row(static_cast<size_t>(d));
  std::vector<double> back(static_cast<size_t>(d));
  for (int h = 0; h < heads; ++h) {
    const float s = scales[static_cast<size_t>(h)];
    EXPECT_GT(s, 0.f);
    for (int t = 0; t < tokens; ++t) {
      const float* xr = &x[(static_cast<size_t>(h) * tokens + t) * d];
      test::quantize_kv_row(Fmt::fp8e4m3, Gran::per_head, d, xr, row.data(), s);
      test::dequantize_kv_row(Fmt::fp8e4m3, Gran::per_head, d, row.data(), back.data(), s);
      for (int e = 0; e < d; ++e) {
        // e4m3 keeps 3 mantissa bits: relative error <= 2^-4 for normals, absolute <= 2^-10 s below.
        const double err = std::fabs(back[e] - xr[e]);
        ASSERT_LE(err, std::max(std::fabs(xr[e]) / 16.0, std::ldexp(static_cast<double>(s), -10)) * (1 + 1e-6)) << "head " << h << " e " << e;
      }
    }
  }
}

}  // namespace
}  // namespace qattn

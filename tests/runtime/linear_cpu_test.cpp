// Linear layers without a GPU: the weight formats code for code, the refusals of a malformed call (made
// before any GPU work), and an NVRTC compile of every candidate tiling of every format and dataflow on
// sm_80, sm_89 and sm_90a without spills.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "generator/search_space.hpp"
#include "qattn/linear.hpp"
#include "qattn/runtime.hpp"
#include "runtime/registry/runtime_impl.hpp"
#include "tests/common/compile_all.hpp"
#include "tests/common/expect_error.hpp"

namespace qattn {
namespace {

using test::expect_bad_input;

std::vector<float> weights(int n, int k, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::vector<float> w(static_cast<size_t>(n) * k);
  for (float& x : w) x = g(rng);
  for (int r = 0; r < n; r += 7) w[static_cast<size_t>(r) * k + (r % k)] = 0.5f;   // an outlier every 7th row
  return w;
}

TEST(LinearWeights, Int8IsSymmetricPerOutputChannel) {
  const Spec s = parse_spec("linear a=fp16 w=int8:per_channel out=fp16 n=9 k=48");
  const std::vector<float> w = weights(9, 48, 1);
  const PackedLinearWeight p = pack_linear_weight(s, w.data());
  ASSERT_EQ(p.bytes.size(), 9u * 48);
  ASSERT_EQ(p.scale.size(), 9u);
  EXPECT_TRUE(p.zero.empty());
  for (int n = 0; n < 9; ++n) {
    float amax = 0;
    for (int k = 0; k < 48; ++k) amax = std::max(amax, std::fabs(w[n * 48 + k]));
    EXPECT_FLOAT_EQ(p.scale[n], amax / 127);
    for (int k = 0; k < 48; ++k) {
      const int code = static_cast<std::int8_t>(p.bytes[n * 48 + k]);   // row-major [n][k], one byte each
      EXPECT_EQ(code, static_cast<int>(std::nearbyint(w[n * 48 + k] / p.scale[n])));
      EXPECT_DOUBLE_EQ(unpacked_weight(s, p, n, k), code * static_cast<double>(p.scale[n]));
      EXPECT_LE(std::fabs(unpacked_weight(s, p, n, k) - w[n * 48 + k]), p.scale[n] / 2 + 1e-7);
    }
  }
}

TEST(LinearWeights, Int4PacksTheEvenKInTheLowNibbleWithAZeroPerGroup) {
  const int n = 3, k = 256;
  const Spec s = parse_spec("linear a=bf16 w=int4:per_group out=bf16 n=3 k=256");
  std::vector<float> w = weights(n, k, 2);
  for (int c = 0; c < 128; ++c) w[2 * k + c] = 0.01f + 0.001f * c;   // an all-positive group: zero point 0
  const PackedLinearWeight p = pack_linear_weight(s, w.data());
  ASSERT_EQ(p.bytes.size(), static_cast<size_t>(n) * k / 2);
  ASSERT_EQ(p.scale.size(), static_cast<size_t>(n) * 2);
  ASSERT_EQ(p.zero.size(), static_cast<size_t>(n) * 2);
  EXPECT_EQ(p.zero[2 * 2], 0.0f);
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < k; ++c) {
      const size_t g = static_cast<size_t>(r) * 2 + c / 128;
      const int code = std::clamp(static_cast<int>(std::nearbyint(w[r * k + c] / p.scale[g]) + p.zero[g]), 0, 15);
      const std::uint8_t byte = p.bytes[static_cast<size_t>(r) * (k / 2) + c / 2];
      EXPECT_EQ(c % 2 == 0 ? byte & 15 : byte >> 4, code) << r << "," << c;
      EXPECT_DOUBLE_EQ(unpacked_weight(s, p, r, c), (code - static_cast<double>(p.zero[g])) * p.scale[g]);
      EXPECT_LE(std::fabs(unpacked_weight(s, p, r, c) - w[r * k + c]), p.scale[g] / 2 + 1e-6);
    }
}

TEST(LinearWeights, SixteenBitWeightsAreTheRoundedElements) {
  const Spec s = parse_spec("linear a=fp16 w=fp16 out=fp16 n=2 k=8");
  const std::vector<float> w = {1.0f, -2.5f, 0.1f, 65504.0f, 1e-8f, 3.14159f, -0.0f, 7.0f,
                                0.5f, 0.25f, -1.0f, 1024.5f, 2048.0f, 1.0f / 3, -7.75f, 100.0f};
  const PackedLinearWeight p = pack_linear_weight(s, w.data());
  ASSERT_EQ(p.bytes.size(), 32u);
  std::uint16_t first, fourth;
  std::memcpy(&first, &p.bytes[0], 2);
  std::memcpy(&fourth, &p.bytes[6], 2);
  EXPECT_EQ(first, 0x3C00);    // 1.0
  EXPECT_EQ(fourth, 0x7BFF);   // 65504, the largest fp16
  EXPECT_DOUBLE_EQ(unpacked_weight(s, p, 1, 3), 1024.0);   // 1024.5 rounds to even
  expect_bad_input([&] { pack_linear_weight(parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=64"), w.data()); }, "linear spec");
  expect_bad_input([&] { unpacked_weight(s, p, 2, 0); }, "outside");
}

// A well-formed call; each case below breaks one thing.
struct CallBuffers {
  alignas(16) unsigned char a[64], w[64], c[64], bias[64];
  float scale[4], zero[4];
};

LinearCall good_call(CallBuffers& b, const char* w) {
  LinearCall call;
  call.spec = parse_spec(std::string("linear a=fp16 w=") + w + " out=fp16 n=256 k=4096 bias arch=sm_90a");
  call.a = b.a;
  call.c = b.c;
  call.weights.w = b.w;
  call.weights.bias = b.bias;
  if (std::string(w) != "fp16") call.weights.scale = b.scale;
  if (std::string(w) == "int4:per_group") call.weights.zero = b.zero;
  call.m = 5;
  return call;
}

TEST(LinearCallCheck, RefusesMalformedCallsOnOneLine) {
  CallBuffers b;
  for (const char* w : {"fp16", "int8:per_channel", "int4:per_group"}) Runtime::Impl::check_linear_call(good_call(b, w));
  const auto refused = [&](const char* w, auto&& breaker, const std::string& needle) {
    LinearCall call = good_call(b, w);
    breaker(call);
    expect_bad_input([&] { Runtime::Impl::check_linear_call(call); }, needle);
  };
  refused("fp16", [](LinearCall& c) { c.m = 0; }, "m >= 1");
  refused("fp16", [](LinearCall& c) { c.a = nullptr; }, "a is null");
  refused("fp16", [&](LinearCall& c) { c.c = b.c + 2; }, "not 16-byte aligned");
  refused("fp16", [](LinearCall& c) { c.weights.bias = nullptr; }, "weights.bias");
  refused("int8:per_channel", [](LinearCall& c) { c.weights.scale = nullptr; }, "weights.scale is null");
  refused("int4:per_group", [](LinearCall& c) { c.weights.zero = nullptr; }, "weights.zero is null");
  refused("int8:per_channel", [&](LinearCall& c) { c.weights.zero = b.zero; }, "only w=int4:per_group has zero points");
  refused("fp16", [&](LinearCall& c) { c.weights.scale = b.scale; }, "has no scales");
  refused("fp16", [](LinearCall& c) { c.lda = 4100; }, "lda=4100");
  refused("fp16", [](LinearCall& c) { c.lda = 100; }, ">= k=4096");
  refused("int4:per_group", [](LinearCall& c) { c.weights.ldw = 2040; }, "weights.ldw=2040 bytes");
  refused("fp16", [](LinearCall& c) { c.ldc = 255; }, ">= n=256");
  refused("fp16", [](LinearCall& c) { c.splits = -1; }, "splits=-1");
  refused("fp16", [](LinearCall& c) { c.spec.bias = false; }, "spec has no bias");
  refused("fp16", [](LinearCall& c) { c.spec = parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=64"); }, "takes a linear spec");
}

// What an untuned call launches, for every format and dataflow on each arch: the tiling of each block_m
// (linear_tiling for the token counts that reach it) builds without spills.
TEST(LinearCompile, EveryUntunedKernelBuildsWithoutSpills) {
  std::vector<std::pair<Spec, Tiling>> points;
  for (Arch arch : {Arch::sm_80, Arch::sm_89, Arch::sm_90a})
    for (const char* w : {"fp16", "int8:per_channel", "int4:per_group"})
      for (const char* flow : {"gemv", "flat", "gemm"}) {
        const Spec s = parse_spec(std::string("linear a=fp16 w=") + w + " out=fp16 n=4096 k=4096 flow=" + flow + " arch=" +
                                  to_string(arch));
        std::vector<Tiling> seen;
        for (int m : {1, 2, 4, 8, 16, 64, 512}) {
          const Tiling t = gen::linear_tiling(s, m, default_limits(arch));
          if (std::find(seen.begin(), seen.end(), t) == seen.end()) seen.push_back(t), points.emplace_back(s, t);
        }
      }
  // bf16 and a bias, at the defaults.
  for (const char* w : {"bf16", "int8:per_channel", "int4:per_group"})
    for (const char* flow : {"gemv", "flat", "gemm"}) {
      const Spec s = parse_spec(std::string("linear a=bf16 w=") + w + " out=bf16 n=1000 k=2048 bias flow=" + flow + " arch=sm_90a");
      points.emplace_back(s, default_tiling(s, default_limits(Arch::sm_90a)));
    }
  EXPECT_GT(test::expect_compiled_without_spills(points), 70u);
}

// The warpgroup GEMM (_wg, sm_90a) of every weight format, at each of its candidate tilings: no spills and
// its wgmma pipeline intact (ptxas did not serialize it).
TEST(LinearCompile, TheWarpgroupGemmKeepsItsPipeline) {
  std::vector<std::pair<Spec, Tiling>> points;
  for (const char* w : {"bf16", "int8:per_channel", "int4:per_group"}) {
    const Spec s = parse_spec(std::string("linear a=bf16 w=") + w + " out=bf16 n=4096 k=14336 bias flow=gemm arch=sm_90a");
    for (const Tiling& t : gen::candidate_tilings(s, default_limits(Arch::sm_90a)))
      if (t.wgmma) points.emplace_back(s, t);
  }
  ASSERT_GE(points.size(), 12u);
  EXPECT_TRUE(points.front().second.wgmma && default_tiling(points.front().first, default_limits(Arch::sm_90a)).wgmma)
      << "the default GEMM on sm_90a is the warpgroup form";
  test::expect_compiled_with_wgmma_pipeline(points);
}

}  // namespace
}  // namespace qattn

// qk=int4 quantization on the CPU (issue #3): the float64 reference math for every Q/K granularity
// with qmax 7, the packed layout of the int4 rows (the mma.sync .s4 operand order), and the plan of
// the packed quantizer. The GPU passes are checked against the same reference in
// tests/templates/attention/prefill_int4_gpu_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "generator/quant_plan.hpp"
#include "tests/common/quant_reference.hpp"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace test {
namespace {

struct Int4Gran {
  Gran gran;
  int group;   // per_block 64 (the runtime's Q/K block); per_warp / per_thread: 32 (Q) or 64 (K)
  const char* name;
};

// The five prefill Q/K granularities, with both operand mappings where they differ.
const Int4Gran kInt4Grans[] = {{Gran::per_tensor, 0, "per_tensor"},   {Gran::per_block, 64, "per_block"},
                               {Gran::per_token, 0, "per_token"},     {Gran::per_warp, 32, "per_warp_q"},
                               {Gran::per_warp, 64, "per_warp_k"},    {Gran::per_thread, 32, "per_thread_q"},
                               {Gran::per_thread, 64, "per_thread_k"}};

// 97 tokens (a short last group of every kind), d = 96 (the odd packed row of 48 bytes).
const Shape kShape{2, 2, 97, 96};

// |x - s·q| <= s/2 (plus the mean when smoothing), |q| <= 7, every group reaches 7 somewhere, and
// scale = amax / 7 exactly, for each granularity, with and without K smoothing, on outlier data.
TEST(Int4Quant, ReferenceRoundTripEveryGranularity) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  HostTensor x = random_tensor(kShape, Layout::bshd, k_like(), seed);
  round_to(x, Fmt::fp16);
  for (const Int4Gran& g : kInt4Grans)
    for (bool smooth : {false, true}) {
      SCOPED_TRACE(std::string(g.name) + (smooth ? " smooth" : ""));
      const QuantRef q = quantize_reference(x, QuantConfig{g.gran, g.group, 7.0, smooth});
      const HostTensor deq = q.dequantize();
      long long bad_err = 0, bad_range = 0;
      int max_code = 0;
      for (int b = 0; b < kShape.batch; ++b)
        for (int h = 0; h < kShape.heads; ++h)
          for (int s = 0; s < kShape.seq; ++s)
            for (int c = 0; c < kShape.dim; ++c) {
              const double scale = q.scale(b, h, s, c);
              const double err = std::fabs(deq.at(b, h, s, c) - x.at(b, h, s, c));
              bad_err += !(err <= scale / 2 * (1 + 1e-12) + 1e-12 * std::fabs(x.at(b, h, s, c)));
              bad_range += std::abs(q.code(b, h, s, c)) > 7;
              max_code = std::max(max_code, std::abs(q.code(b, h, s, c)));
            }
      EXPECT_EQ(bad_err, 0);
      EXPECT_EQ(bad_range, 0);
      EXPECT_EQ(max_code, 7);
      // per_token: the scale of a row is its own abs-max / 7.
      if (g.gran == Gran::per_token && !smooth) {
        double amax = 0;
        for (int c = 0; c < kShape.dim; ++c) amax = std::max(amax, std::fabs(x.at(1, 1, 50, c)));
        EXPECT_DOUBLE_EQ(q.scale(1, 1, 50, 0), amax / 7.0);
      }
    }
}

// An all-zero row / group / tensor: scale 0, codes 0, dequantized 0, never NaN.
TEST(Int4Quant, ZeroGroupsGiveZeroScaleAndNoNaN) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  HostTensor x = random_tensor(kShape, Layout::bhsd, plain(), seed);
  for (int s = 0; s < 64; ++s)
    for (int c = 0; c < kShape.dim; ++c) x.at(1, 0, s, c) = 0.0;   // a zero 64-token block of one head
  HostTensor zeros = HostTensor::zeros(kShape);
  for (const Int4Gran& g : kInt4Grans)
    for (bool smooth : {false, true}) {
      SCOPED_TRACE(std::string(g.name) + (smooth ? " smooth" : ""));
      const QuantRef z = quantize_reference(zeros, QuantConfig{g.gran, g.group, 7.0, smooth});
      for (double s : z.scales) EXPECT_EQ(s, 0.0);
      for (std::int8_t c : z.codes) ASSERT_EQ(c, 0);
      for (double v : z.dequantize().data) ASSERT_EQ(v, 0.0);
      if (smooth || g.gran == Gran::per_tensor) continue;   // the zero block is not a scale group of its own
      const QuantRef q = quantize_reference(x, QuantConfig{g.gran, g.group, 7.0, false});
      EXPECT_EQ(q.scale(1, 0, 10, 0), 0.0);
      for (double v : q.dequantize().data) ASSERT_TRUE(std::isfinite(v));
      for (int c = 0; c < kShape.dim; ++c) ASSERT_EQ(q.code(1, 0, 10, c), 0);
    }
}

// Byte i of a packed row holds code 2i in its low nibble and code 2i + 1 in its high nibble, two's
// complement: the operand order of mma.sync m16n8k64 .s4 (lower elements in lower bits).
TEST(Int4Quant, PackedLayoutIsLowNibbleFirst) {
  const std::vector<std::int8_t> row = {1, -1, 7, -7, 0, 3, -8, 5};
  const std::vector<std::uint8_t> packed = pack_int4(row, 8);
  ASSERT_EQ(packed.size(), 4u);
  EXPECT_EQ(packed[0], 0xF1);   // 1 low, -1 (0xF) high
  EXPECT_EQ(packed[1], 0x97);   // 7 low, -7 (0x9) high
  EXPECT_EQ(packed[2], 0x30);
  EXPECT_EQ(packed[3], 0x58);   // -8 (0x8) low, 5 high
  EXPECT_EQ(unpack_int4(packed, 8), row);
  EXPECT_THROW(pack_int4(std::vector<std::int8_t>{9, 0}, 2), std::invalid_argument);

  // Round trip of reference codes at every prefill head dim (rows of d / 2 bytes, d = 96: 48).
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  for (int d : {64, 96, 128, 256}) {
    const HostTensor x = random_tensor(Shape{1, 2, 33, d}, Layout::bhsd, q_like(), seed);
    const QuantRef q = quantize_reference(x, QuantConfig{Gran::per_token, 0, 7.0, false});
    const std::vector<std::uint8_t> p = pack_int4(q.codes, d);
    EXPECT_EQ(p.size(), q.codes.size() / 2) << d;
    EXPECT_EQ(unpack_int4(p, d), q.codes) << d;
    // Element c of row r sits in byte r * d/2 + c/2.
    const int r = 40, c = d - 3;
    const int nib = c % 2 ? p[static_cast<size_t>(r) * d / 2 + c / 2] >> 4 : p[static_cast<size_t>(r) * d / 2 + c / 2] & 0xf;
    EXPECT_EQ(nib >= 8 ? nib - 16 : nib, q.codes[static_cast<size_t>(r) * d + c]) << d;
  }
}

// The packed quantizer is QuantizeRows<..., Pack4 = true>; the unpacked plan (int8, and int4 stored one
// code per byte) keeps its template-id. pack4 needs rows and qmax <= 7.
TEST(Int4Quant, PlanOfThePackedQuantizer) {
  gen::QuantRequest r;
  r.gran = Gran::per_warp;
  r.group = 64;
  r.smooth = true;
  r.d = 96;
  const gen::QuantProblem p{1, 2, 97, 97};
  const std::string unpacked = gen::plan_quant(r, p).launches.back().pass;
  EXPECT_EQ(unpacked.find(", true>"), unpacked.size() - 7) << unpacked;   // Smooth, no Pack4
  r.qmax = 7;
  EXPECT_EQ(gen::plan_quant(r, p).launches.back().pass, unpacked);   // qmax is a launch parameter
  r.pack4 = true;
  const std::string packed = gen::plan_quant(r, p).launches.back().pass;
  EXPECT_EQ(packed, unpacked.substr(0, unpacked.size() - 1) + ", true>");
  r.qmax = 127;
  EXPECT_NE(gen::quant_request_error(r, p), "");
  r.qmax = 7;
  r.transpose = true;
  r.gran = Gran::per_channel;
  EXPECT_NE(gen::quant_request_error(r, gen::QuantProblem{1, 2, 97, 128}), "");
}

}  // namespace
}  // namespace test
}  // namespace qattn

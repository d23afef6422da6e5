// The float64 quantizer: the semantics the GPU passes are checked against, code for code.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>

#include "reference/format_sim.hpp"
#include "qattn/decode/fp8_e4m3.h"
#include "qattn/quant/quant_config.h"

#include "tests/common/quant_reference.hpp"
#include "tests/common/random_data.hpp"
#include "tests/common/reference_attention.hpp"
#include "tests/common/metrics.hpp"

namespace qattn {
namespace test {
namespace {

struct GranCase {
  Gran gran;
  int group;
  const char* name;
};

const GranCase kGrans[] = {{Gran::per_tensor, 0, "per_tensor"},
                           {Gran::per_block, 64, "per_block64"},
                           {Gran::per_block, 128, "per_block128"},
                           {Gran::per_token, 0, "per_token"},
                           {Gran::per_channel, 0, "per_channel"},
                           {Gran::per_warp, 32, "per_warp_q"},
                           {Gran::per_warp, 64, "per_warp_k"},
                           {Gran::per_thread, 32, "per_thread_q"},
                           {Gran::per_thread, 64, "per_thread_k"}};

// 150 tokens: neither a multiple of 64 nor of 128, so every per_block case has a short last group.
const Shape kShape{2, 3, 150, 64};

TEST(QuantReference, RoundTripWithinHalfScaleAndGroupMaxHitsQmax) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  for (Layout layout : {Layout::bhsd, Layout::bshd}) {
    HostTensor x = random_tensor(kShape, layout, k_like(), seed);
    round_to(x, Fmt::fp16);
    for (const GranCase& g : kGrans)
      for (double qmax : {127.0, 7.0})
        for (bool smooth : {false, true}) {
          SCOPED_TRACE(std::string(g.name) + " qmax=" + std::to_string(qmax) + (smooth ? " smooth " : " ") +
                       to_string(layout));
          const QuantRef q = quantize_reference(x, QuantConfig{g.gran, g.group, qmax, smooth});
          const HostTensor deq = q.dequantize();
          // per_warp / per_thread store one scale per row: their groups are keyed by fragment_group.
          const QuantConfig cfg = q.config;
          auto group_key = [&](int b, int h, int s, int c) {
            return fragment_group(cfg, s) < 0 ? q.scale_index(b, h, s, c)
                                              : q.scale_index(b, h, 0, 0) + fragment_group(cfg, s);
          };
          std::map<long long, int> group_max_code;
          long long bad = 0;
          for (int b = 0; b < kShape.batch; ++b)
            for (int h = 0; h < kShape.heads; ++h)
              for (int s = 0; s < kShape.seq; ++s)
                for (int c = 0; c < kShape.dim; ++c) {
                  const double scale = q.scale(b, h, s, c);
                  const double err = std::fabs(deq.at(b, h, s, c) - x.at(b, h, s, c));
                  bad += !(err <= scale / 2 * (1 + 1e-12) + 1e-12 * std::fabs(x.at(b, h, s, c)));
                  const int code = q.code(b, h, s, c);
                  bad += std::abs(code) > qmax;
                  int& m = group_max_code[group_key(b, h, s, c)];
                  m = std::max(m, std::abs(code));
                }
          EXPECT_EQ(bad, 0);
          for (size_t i = 0; i < q.scales.size(); ++i) ASSERT_GT(q.scales[i], 0) << "random data has no all-zero group";
          for (const auto& [key, m] : group_max_code) EXPECT_EQ(m, static_cast<int>(qmax)) << "scale group " << key;
        }
  }
}

// e4m3 codes (qk=fp8e4m3): every value within half an e4m3 step of x / scale (the group's largest at 448),
// and the code-for-code checker accepts the reference's own codes and catches a code one step off.
TEST(QuantReference, Fp8CodesAreTheNearestE4m3AndTheCheckerSeesAStepOff) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  HostTensor x = random_tensor(kShape, Layout::bhsd, k_like(), seed);
  round_to(x, Fmt::fp16);
  for (const GranCase& g : kGrans) {
    if (g.gran == Gran::per_channel) continue;   // not a qk=fp8e4m3 granularity
    SCOPED_TRACE(g.name);
    const QuantRef q = quantize_reference(x, QuantConfig{g.gran, g.group, 448, false, 0, 0, true});
    const HostTensor deq = q.dequantize();
    long long bad = 0;
    double largest = 0;
    for (int b = 0; b < kShape.batch; ++b)
      for (int h = 0; h < kShape.heads; ++h)
        for (int s = 0; s < kShape.seq; ++s)
          for (int c = 0; c < kShape.dim; ++c) {
            const double scale = q.scale(b, h, s, c), u = x.at(b, h, s, c) / scale;
            const double v = fp8::decode_e4m3(static_cast<unsigned char>(q.code(b, h, s, c)));
            EXPECT_EQ(deq.at(b, h, s, c), v * scale);
            bad += !(std::fabs(v - u) <= std::max(std::ldexp(1.0, -10), std::fabs(u) / 16) * (1 + 1e-9));
            // The nearest e4m3 value, or the other one of a tie that x / scale rounded to float makes.
            const double w = reference::sim::round_e4m3(u);
            EXPECT_TRUE(v == w || std::fabs(std::fabs(v - u) - std::fabs(w - u)) <= 1e-6 * std::fabs(u))
                << b << " " << h << " " << s << " " << c << ": " << v << " for " << u;
            largest = std::max(largest, std::fabs(v));
          }
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(largest, 448.0);
    // The checker: the reference's own codes pass; one code moved to its neighbour fails.
    std::vector<float> scales(q.scales.begin(), q.scales.end());
    std::vector<std::int8_t> codes = q.codes;
    QuantizedView view;
    view.codes = codes.data();
    view.strides = Strides{static_cast<long long>(kShape.heads) * kShape.seq * kShape.dim,
                           static_cast<long long>(kShape.seq) * kShape.dim, kShape.dim, 1};
    view.seq_pad = kShape.seq;
    view.scales = scales.data();
    view.scale_sh = q.scales_per_head();
    view.scale_sb = g.gran == Gran::per_tensor ? 0 : q.scales_per_head() * kShape.heads;
    if (g.gran == Gran::per_tensor) view.scale_sh = 0;
    EXPECT_TRUE(check_quantized(x, q, view).ok()) << check_quantized(x, q, view).report();
    codes[7] = static_cast<std::int8_t>(codes[7] + 1);
    const QuantCheck off = check_quantized(x, q, view);
    EXPECT_EQ(off.bad_codes, 1) << off.report();
  }
}

TEST(QuantReference, Int4CodesStayInSymmetricRange) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  HostTensor x = random_tensor(kShape, Layout::bhsd, q_like(Dist::uniform), seed);
  for (const GranCase& g : kGrans) {
    const QuantRef q = quantize_reference(x, QuantConfig{g.gran, g.group, 7.0, false});
    int lo = 0, hi = 0;
    for (std::int8_t c : q.codes) lo = std::min<int>(lo, c), hi = std::max<int>(hi, c);
    EXPECT_EQ(lo, -7) << g.name;
    EXPECT_EQ(hi, 7) << g.name;
  }
}

TEST(QuantReference, AllZeroGroupsGiveZeroScaleAndNoNaN) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  HostTensor x = random_tensor(kShape, Layout::bhsd, plain(), seed);
  for (int c = 0; c < kShape.dim; ++c) {
    x.at(0, 1, 7, c) = 0.0;                                   // a zero token
    for (int s = 64; s < 128; ++s) x.at(1, 2, s, c) = 0.0;    // a zero 64-token group
  }
  for (int s = 0; s < kShape.seq; ++s) x.at(1, 0, s, 5) = 0.0;   // a zero channel
  const QuantRef tok = quantize_reference(x, QuantConfig{Gran::per_token, 0, 127, false});
  EXPECT_EQ(tok.scale(0, 1, 7, 0), 0.0);
  EXPECT_GT(tok.scale(0, 1, 8, 0), 0.0);
  const QuantRef blk = quantize_reference(x, QuantConfig{Gran::per_block, 64, 127, false});
  EXPECT_EQ(blk.scale(1, 2, 64, 0), 0.0);
  EXPECT_GT(blk.scale(1, 2, 128, 0), 0.0);
  const QuantRef chn = quantize_reference(x, QuantConfig{Gran::per_channel, 0, 127, false});
  EXPECT_EQ(chn.scale(1, 0, 0, 5), 0.0);
  EXPECT_GT(chn.scale(1, 0, 0, 6), 0.0);
  for (const QuantRef* q : {&tok, &blk, &chn}) {
    const HostTensor deq = q->dequantize();
    for (double v : deq.data) ASSERT_TRUE(std::isfinite(v));
    for (int c = 0; c < kShape.dim; ++c) EXPECT_EQ(deq.at(0, 1, 7, c), 0.0);
  }

  HostTensor zeros = HostTensor::zeros(kShape);
  for (const GranCase& g : kGrans)
    for (bool smooth : {false, true}) {
      const QuantRef q = quantize_reference(zeros, QuantConfig{g.gran, g.group, 127, smooth});
      for (double s : q.scales) EXPECT_EQ(s, 0.0) << g.name;
      for (std::int8_t c : q.codes) ASSERT_EQ(c, 0) << g.name;
      for (double v : q.dequantize().data) ASSERT_EQ(v, 0.0) << g.name;
    }
}

TEST(QuantReference, PerBlockGroupsEndAtSequenceEnd) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  HostTensor x = random_tensor(kShape, Layout::bshd, plain(), seed);
  // Make the short last group (tokens 128..149) three times larger, so its scale cannot come from
  // anything but its own 22 tokens.
  for (int b = 0; b < kShape.batch; ++b)
    for (int h = 0; h < kShape.heads; ++h)
      for (int s = 128; s < kShape.seq; ++s)
        for (int c = 0; c < kShape.dim; ++c) x.at(b, h, s, c) *= 3.0;
  const QuantRef q = quantize_reference(x, QuantConfig{Gran::per_block, 64, 127, false});
  ASSERT_EQ(q.scales_per_head(), 3);
  ASSERT_EQ(q.scales.size(), static_cast<size_t>(kShape.batch * kShape.heads * 3));
  for (int b = 0; b < kShape.batch; ++b)
    for (int h = 0; h < kShape.heads; ++h) {
      double amax[3] = {0, 0, 0};
      for (int s = 0; s < kShape.seq; ++s)
        for (int c = 0; c < kShape.dim; ++c) amax[s / 64] = std::max(amax[s / 64], std::fabs(x.at(b, h, s, c)));
      for (int g = 0; g < 3; ++g) EXPECT_DOUBLE_EQ(q.scale(b, h, g * 64, 0), amax[g] / 127);
      EXPECT_EQ(q.scale_index(b, h, 127, 0) + 1, q.scale_index(b, h, 128, 0));
      EXPECT_EQ(q.scale_index(b, h, 149, 63), q.scale_index(b, h, 128, 0));
    }
}

// The rows of each per_warp / per_thread group, written out from the mapping of generator/quant_plan.hpp (not
// through fragment_group), for heads of `seq` tokens.
std::vector<std::vector<int>> fragment_groups(Gran gran, int group, int seq) {
  std::vector<std::vector<int>> out;
  for (int base = 0; base < seq; base += group) {
    if (gran == Gran::per_warp) {
      out.emplace_back();
      for (int i = 0; i < group; ++i) out.back().push_back(base + i);
    } else if (group == 32) {
      for (int g = 0; g < 8; ++g) out.push_back({base + g, base + g + 8, base + g + 16, base + g + 24});
    } else {
      for (int t = 0; t < 4; ++t) {
        out.emplace_back();
        for (int i = 0; i < 8; ++i) out.back().insert(out.back().end(), {base + 8 * i + 2 * t, base + 8 * i + 2 * t + 1});
      }
    }
  }
  for (auto& g : out) g.erase(std::remove_if(g.begin(), g.end(), [&](int s) { return s >= seq; }), g.end());
  out.erase(std::remove_if(out.begin(), out.end(), [](const std::vector<int>& g) { return g.empty(); }), out.end());
  return out;
}

// per_warp / per_thread: ragged lengths (groups cut by the sequence end), outlier channels, smoothing.
// Every row carries the abs-max of its group's existing rows / qmax, equal across the group; codes are
// in range and some code of every group reaches qmax.
TEST(QuantReference, FragmentGroupScalesOverRaggedLengths) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  for (int seq : {1, 31, 33, 65, 1000})
    for (const GranCase& g : kGrans) {
      if (g.gran != Gran::per_warp && g.gran != Gran::per_thread) continue;
      const Shape shape{1, 2, seq, 64};
      HostTensor x = random_tensor(shape, seq % 2 ? Layout::bshd : Layout::bhsd, g.group == 32 ? q_like() : k_like(),
                                   seed + static_cast<std::uint64_t>(seq));
      // A few token outliers, so a group's scale is visibly its own.
      for (int s = 3; s < seq; s += 37) x.at(0, 1, s, s % 64) *= 50.0;
      round_to(x, Fmt::fp16);
      const auto groups = fragment_groups(g.gran, g.group, seq);
      long long rows = 0;
      for (const auto& grp : groups) rows += static_cast<long long>(grp.size());
      ASSERT_EQ(rows, seq) << "the groups partition the rows";
      for (bool smooth : {false, true}) {
        SCOPED_TRACE(std::string(g.name) + " seq=" + std::to_string(seq) + (smooth ? " smooth" : ""));
        const QuantRef q = quantize_reference(x, QuantConfig{g.gran, g.group, 127, smooth});
        ASSERT_EQ(q.scales_per_head(), seq);
        for (int h = 0; h < shape.heads; ++h)
          for (const auto& grp : groups) {
            double amax = 0;
            for (int s : grp)
              for (int c = 0; c < shape.dim; ++c) amax = std::max(amax, std::fabs(x.at(0, h, s, c) - q.mean_at(0, h, c)));
            int max_code = 0;
            for (int s : grp) {
              EXPECT_EQ(q.scale(0, h, s, 0), amax / 127) << "row " << s;
              EXPECT_EQ(fragment_group(q.config, s), fragment_group(q.config, grp[0]));
              for (int c = 0; c < shape.dim; ++c) {
                ASSERT_LE(std::abs(q.code(0, h, s, c)), 127);
                max_code = std::max(max_code, std::abs(q.code(0, h, s, c)));
              }
            }
            // seq = 1 with smoothing centers the one row to zero: an all-zero group (scale 0, codes 0).
            EXPECT_EQ(max_code, amax > 0 ? 127 : 0) << "group of row " << grp[0];
          }
      }
    }
}

// fragment_group numbers the same groups as the accuracy simulator's scale_group (reference/format_sim),
// whose table chose these mappings: group 32 is its Q role, group 64 its K role.
TEST(QuantReference, FragmentGroupsMatchTheAccuracySimulator) {
  for (Gran gran : {Gran::per_warp, Gran::per_thread})
    for (int group : {32, 64})
      for (int s = 0; s < 1000; ++s) {
        const auto sim_gran = gran == Gran::per_warp ? reference::sim::Gran::per_warp : reference::sim::Gran::per_thread;
        const auto role = group == 32 ? reference::sim::Role::q : reference::sim::Role::k;
        EXPECT_EQ(fragment_group(QuantConfig{gran, group, 127, false}, s), reference::sim::scale_group(sim_gran, role, s))
            << static_cast<int>(gran) << " group " << group << " row " << s;
      }
  EXPECT_EQ(fragment_group(QuantConfig{Gran::per_token, 0, 127, false}, 5), -1);
  EXPECT_THROW(quantize_reference(HostTensor::zeros(Shape{1, 1, 4, 8}), QuantConfig{Gran::per_warp, 128, 127, false}),
               std::invalid_argument);
}

// A whole per_thread group of zeros (and a zero tail group) gets scale 0 and codes 0, never NaN; its
// neighbours keep their own scales.
TEST(QuantReference, FragmentZeroGroupsGiveZeroScale) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const Shape shape{1, 1, 97, 64};
  HostTensor x = random_tensor(shape, Layout::bhsd, plain(), seed);
  for (int c = 0; c < shape.dim; ++c) {
    for (int i = 0; i < 4; ++i) x.at(0, 0, 32 + 3 + 8 * i, c) = 0.0;                  // Q group g=3 of chunk 1
    for (int i = 0; i < 8; ++i) x.at(0, 0, 8 * i + 2, c) = x.at(0, 0, 8 * i + 3, c) = 0.0;   // K group t=1
    x.at(0, 0, 96, c) = 0.0;                                                           // tail: row 96 alone
  }
  const QuantRef q = quantize_reference(x, QuantConfig{Gran::per_thread, 32, 127, false});
  const QuantRef k = quantize_reference(x, QuantConfig{Gran::per_thread, 64, 127, false});
  const QuantRef w = quantize_reference(x, QuantConfig{Gran::per_warp, 32, 127, false});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(q.scale(0, 0, 35 + 8 * i, 0), 0.0);
  EXPECT_GT(q.scale(0, 0, 36, 0), 0.0);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(k.scale(0, 0, 8 * i + 2, 0), 0.0);
    EXPECT_EQ(k.scale(0, 0, 8 * i + 3, 0), 0.0);
  }
  EXPECT_GT(k.scale(0, 0, 4, 0), 0.0);
  // Row 96 is the only existing row of its Q tail group (per_warp [96, 128), per_thread {96, 104, 112,
  // 120}); as a key it shares the group {64 + 8i, 65 + 8i} with rows 64, 65, 72, ... of the last block.
  EXPECT_EQ(q.scale(0, 0, 96, 0), 0.0);
  EXPECT_EQ(w.scale(0, 0, 96, 0), 0.0);
  EXPECT_EQ(k.scale(0, 0, 96, 0), k.scale(0, 0, 64, 0));
  EXPECT_GT(k.scale(0, 0, 96, 0), 0.0);
  for (const QuantRef* r : {&q, &k, &w}) {
    for (double v : r->dequantize().data) ASSERT_TRUE(std::isfinite(v));
    for (int c = 0; c < shape.dim; ++c) EXPECT_EQ(r->code(0, 0, 96, c), 0);
  }
}

TEST(QuantReference, RoundsHalfToEven) {
  // amax 127 and qmax 127 give scale 1, so the codes are the rounded inputs themselves.
  HostTensor x = HostTensor::zeros(Shape{1, 1, 1, 8});
  const double in[8] = {127, 0.5, 1.5, 2.5, -0.5, -2.5, 3.4999, -126.5};
  const int want[8] = {127, 0, 2, 2, 0, -2, 3, -126};
  for (int c = 0; c < 8; ++c) x.at(0, 0, 0, c) = in[c];
  const QuantRef q = quantize_reference(x, QuantConfig{Gran::per_token, 0, 127, false});
  ASSERT_DOUBLE_EQ(q.scale(0, 0, 0, 0), 1.0);
  for (int c = 0; c < 8; ++c) EXPECT_EQ(q.code(0, 0, 0, c), want[c]) << "input " << in[c];
}

TEST(QuantReference, SmoothingQuantizesTheCenteredTensor) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const HostTensor x = random_tensor(kShape, Layout::bhsd, k_like(), seed);
  const std::vector<double> mean = channel_mean(x);
  // The biased channels must show up in the mean, or this test checks nothing.
  double largest = 0;
  for (double m : mean) largest = std::max(largest, std::fabs(m));
  ASSERT_GT(largest, 4.0);
  const HostTensor centered = subtract_channel_mean(x);
  for (const GranCase& g : kGrans) {
    const QuantRef smooth = quantize_reference(x, QuantConfig{g.gran, g.group, 127, true});
    const QuantRef plain_q = quantize_reference(centered, QuantConfig{g.gran, g.group, 127, false});
    ASSERT_EQ(smooth.mean.size(), mean.size());
    for (size_t i = 0; i < mean.size(); ++i) EXPECT_EQ(smooth.mean[i], mean[i]);
    long long differ = 0;
    for (size_t i = 0; i < smooth.codes.size(); ++i) differ += smooth.codes[i] != plain_q.codes[i];
    EXPECT_EQ(differ, 0) << g.name;
    for (size_t i = 0; i < smooth.scales.size(); ++i) EXPECT_NEAR(smooth.scales[i], plain_q.scales[i], 1e-14);
    // Smoothing must help a tensor with biased channels: the round trip error drops.
    const ErrorMetrics with = compare(x, smooth.dequantize());
    const QuantRef unsmoothed = quantize_reference(x, QuantConfig{g.gran, g.group, 127, false});
    const ErrorMetrics without = compare(x, unsmoothed.dequantize());
    if (g.gran != Gran::per_channel) {
      EXPECT_LT(with.rel_l2, without.rel_l2) << g.name;
    }
  }
}

TEST(QuantReference, KSmoothingLeavesAttentionUnchanged) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const HostTensor q = random_tensor(Shape{2, 4, 37, 64}, Layout::bshd, q_like(), seed);
  const HostTensor k = random_tensor(Shape{2, 2, 53, 64}, Layout::bhsd, k_like(), seed + 1);
  const HostTensor v = random_tensor(Shape{2, 2, 53, 64}, Layout::bhsd, v_like(), seed + 2);
  const HostTensor k_smooth = subtract_channel_mean(k);
  for (bool causal : {false, true}) {
    std::vector<double> lse_a, lse_b;
    const HostTensor a = reference_attention(q, k, v, AttentionConfig{causal, 0}, &lse_a);
    const HostTensor b = reference_attention(q, k_smooth, v, AttentionConfig{causal, 0}, &lse_b);
    const ErrorMetrics m = compare(a, b);
    EXPECT_LE(m.max_abs, 1e-12) << m.report();
    // The shift is real: the LSE moves by q.mean(K) * scale, the output does not.
    double lse_shift = 0;
    for (size_t i = 0; i < lse_a.size(); ++i) lse_shift = std::max(lse_shift, std::fabs(lse_a[i] - lse_b[i]));
    EXPECT_GT(lse_shift, 1.0);
  }
}

// The rotation of quant_config.h: a Q-side row · a K-side row equals the unrotated dot product (H S is
// orthogonal up to B, and K carries the 1 / B), at every head dim's block; a single large channel comes
// out spread flat over its block (|H S e_c| = 1 on all B channels); twice Q-side is B times the identity.
TEST(QuantReference, RotationKeepsDotProductsAndSpreadsAChannel) {
  std::mt19937_64 gen(fresh_seed());
  std::normal_distribution<double> normal;
  for (int d : {64, 96, 128, 256}) {
    SCOPED_TRACE("d=" + std::to_string(d));
    const int block = quant::rotation_block(d);
    EXPECT_EQ(d % block, 0);
    std::vector<double> q(static_cast<size_t>(d)), k(q.size());
    for (int i = 0; i < d; ++i) q[static_cast<size_t>(i)] = normal(gen), k[static_cast<size_t>(i)] = normal(gen) + 7.0;
    double want = 0;
    for (int i = 0; i < d; ++i) want += q[static_cast<size_t>(i)] * k[static_cast<size_t>(i)];
    std::vector<double> qr = q, kr = k;
    quant::rotate_row_reference(qr.data(), d, quant::kRotateQ);
    quant::rotate_row_reference(kr.data(), d, quant::kRotateK);
    double got = 0;
    for (int i = 0; i < d; ++i) got += qr[static_cast<size_t>(i)] * kr[static_cast<size_t>(i)];
    EXPECT_NEAR(got, want, 1e-10 * (1 + std::fabs(want)));
    EXPECT_GT(std::fabs(qr[0] - q[0]), 1e-6);   // it did rotate
    std::vector<double> twice = q;
    quant::rotate_row_reference(twice.data(), d, quant::kRotateQ);
    // (H S)^T = S H, so (H S) (H S) is not the identity; but H S x rotated back by S H / B is x.
    std::vector<double> back = twice;
    for (int c0 = 0; c0 < d; c0 += block) {
      std::vector<double> blk(back.begin() + c0, back.begin() + c0 + block);
      for (int h = 1; h < block; h *= 2)
        for (int i = 0; i < block; ++i)
          if (!(i & h)) {
            const double a = blk[static_cast<size_t>(i)], b = blk[static_cast<size_t>(i + h)];
            blk[static_cast<size_t>(i)] = a + b, blk[static_cast<size_t>(i + h)] = a - b;
          }
      for (int c = 0; c < block; ++c)
        back[static_cast<size_t>(c0 + c)] = blk[static_cast<size_t>(c)] / block * (quant::rotation_negates(c) ? -1 : 1);
    }
    for (int i = 0; i < d; ++i) EXPECT_NEAR(back[static_cast<size_t>(i)], q[static_cast<size_t>(i)], 1e-12);
    std::vector<double> spike(static_cast<size_t>(d), 0.0);
    spike[static_cast<size_t>(d - 3)] = 1.0;
    quant::rotate_row_reference(spike.data(), d, quant::kRotateQ);
    for (int i = 0; i < d; ++i)
      EXPECT_EQ(std::fabs(spike[static_cast<size_t>(i)]), i / block == (d - 3) / block ? 1.0 : 0.0) << i;
  }
}

// A few x10 channels (no mean removes them) set every row's scale; rotated, the reference quantizer's
// codes reproduce Q·K^T several times more closely at int8 and int4, and the rotated codes dequantize
// to the rotated rows within half a scale.
TEST(QuantReference, RotationShrinksTheScoreErrorOfScaledChannels) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const Shape shape{1, 2, 256, 128};
  const HostTensor q = random_tensor(shape, Layout::bhsd, q_like(), seed);   // 4 channels x10
  const HostTensor k = random_tensor(shape, Layout::bhsd, k_like(), seed + 1);
  for (double qmax : {127.0, 7.0}) {
    SCOPED_TRACE("qmax=" + std::to_string(qmax));
    double err[2] = {0, 0};
    for (int rotate : {0, 1}) {
      const QuantRef qr = quantize_reference(q, {Gran::per_token, 0, qmax, false, 0, rotate ? quant::kRotateQ : 0});
      const QuantRef kr = quantize_reference(k, {Gran::per_token, 0, qmax, true, 0, rotate ? quant::kRotateK : 0});
      const HostTensor qh = qr.dequantize(), kh = kr.dequantize();
      const HostTensor qc = centred_rows(q, {}, rotate ? quant::kRotateQ : 0);
      const HostTensor kc = centred_rows(k, kr.mean, rotate ? quant::kRotateK : 0);
      for (int h = 0; h < shape.heads; ++h)
        for (int s = 0; s < shape.seq; ++s)
          for (int c = 0; c < shape.dim; ++c)
            ASSERT_LE(std::fabs(qh.at(0, h, s, c) - qc.at(0, h, s, c)), qr.scale(0, h, s, c) / 2 * (1 + 1e-12));
      for (int h = 0; h < shape.heads; ++h)
        for (int i = 0; i < shape.seq; i += 7)
          for (int j = 0; j < shape.seq; j += 5) {
            double exact = 0, quantized = 0;
            for (int c = 0; c < shape.dim; ++c) {
              exact += q.at(0, h, i, c) * (k.at(0, h, j, c) - kr.mean_at(0, h, c));
              quantized += qh.at(0, h, i, c) * kh.at(0, h, j, c);
            }
            err[rotate] += (quantized - exact) * (quantized - exact);
          }
    }
    EXPECT_LT(err[1] * 4, err[0]) << "squared score error unrotated " << err[0] << ", rotated " << err[1];
  }
}

// The smoothing mean's sample (K with token-local scales, quant_config.h's sampled_token): every token
// up to the sample size; above it one token in each of S equal strides (the middle one), strictly
// increasing, so never a run of the first tokens, and token 0 only when a stride is under 2 tokens.
TEST(QuantReference, MeanSampleTakesOneTokenPerStride) {
  auto every = [](int n) {
    std::vector<int> v(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
    return v;
  };
  EXPECT_EQ(mean_tokens(10, 0), every(10));
  EXPECT_EQ(mean_tokens(10, 10), every(10));
  EXPECT_EQ(mean_tokens(10, 1000), every(10));
  const std::vector<int> quarter = mean_tokens(4096, 1024);
  ASSERT_EQ(quarter.size(), 1024u);
  for (int i = 0; i < 1024; ++i) EXPECT_EQ(quarter[static_cast<size_t>(i)], 4 * i + 2) << i;
  for (int seq : {1025, 1500, 2047, 2048, 4097, 16384, 100000})
    for (int sample : {1, 2, 3, 100, 1024}) {
      const std::vector<int> t = mean_tokens(seq, sample);
      ASSERT_EQ(t.size(), static_cast<size_t>(sample));
      for (int i = 0; i < sample; ++i) {
        // Token t of sample i overlaps the i-th stride [i * seq / S, (i + 1) * seq / S) (real bounds),
        // and follows the one before.
        const long long t_i = t[static_cast<size_t>(i)];
        EXPECT_GT((t_i + 1) * sample, 1LL * i * seq) << seq << " " << sample << " " << i;
        EXPECT_LT(t_i * sample, 1LL * (i + 1) * seq) << seq << " " << sample << " " << i;
        if (i > 0) {
          EXPECT_GT(t_i, t[static_cast<size_t>(i - 1)]) << seq << " " << sample << " " << i;
        }
      }
      if (seq >= 2 * sample) {
        EXPECT_GT(t[0], 0) << seq << " " << sample;
      }
    }
}

// With a sample the mean is the sampled tokens' mean and the codes those of the tensor centred on it;
// at seq_len <= the sample, everything equals the plain smoothing bit for bit.
TEST(QuantReference, SampledMeanCentresTheTensorOnTheSample) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const Shape shape{2, 3, 700, 64};
  const int sample = 100;
  HostTensor x = random_tensor(shape, Layout::bshd, k_like(), seed);
  round_to(x, Fmt::fp16);
  const std::vector<int> tokens = mean_tokens(shape.seq, sample);
  const HostTensor centered = subtract_channel_mean(x, sample);
  for (const GranCase& g : kGrans) {
    if (g.gran == Gran::per_tensor || g.gran == Gran::per_channel) continue;   // the runtime never samples these
    SCOPED_TRACE(g.name);
    const QuantRef sampled = quantize_reference(x, QuantConfig{g.gran, g.group, 127, true, sample});
    const QuantRef full = quantize_reference(x, QuantConfig{g.gran, g.group, 127, true});
    double mean_moved = 0;
    for (int b = 0; b < shape.batch; ++b)
      for (int h = 0; h < shape.heads; ++h)
        for (int c = 0; c < shape.dim; ++c) {
          double sum = 0;
          for (int s : tokens) sum += x.at(b, h, s, c);
          EXPECT_NEAR(sampled.mean_at(b, h, c), sum / sample, 1e-12);
          mean_moved = std::max(mean_moved, std::fabs(sampled.mean_at(b, h, c) - full.mean_at(b, h, c)));
        }
    EXPECT_GT(mean_moved, 1e-3) << "the sample's mean equals the full mean: this checks nothing";
    const QuantRef plain = quantize_reference(centered, QuantConfig{g.gran, g.group, 127, false});
    long long differ = 0;
    for (size_t i = 0; i < sampled.codes.size(); ++i) differ += sampled.codes[i] != plain.codes[i];
    EXPECT_EQ(differ, 0);
    for (size_t i = 0; i < sampled.scales.size(); ++i) EXPECT_NEAR(sampled.scales[i], plain.scales[i], 1e-14);

    const QuantRef at_sample = quantize_reference(x, QuantConfig{g.gran, g.group, 127, true, shape.seq});
    EXPECT_EQ(at_sample.mean, full.mean);
    EXPECT_EQ(at_sample.codes, full.codes);
    EXPECT_EQ(at_sample.scales, full.scales);
  }
  EXPECT_THROW(quantize_reference(x, QuantConfig{Gran::per_token, 0, 127, true, -1}), std::invalid_argument);
}

// Any per-channel vector subtracted from K leaves the attention output unchanged, so the sample's
// mean serves K smoothing exactly; the LSE moves by q·mean_sample * scale, which the runtime adds back.
TEST(QuantReference, KSmoothingWithASampledMeanLeavesAttentionUnchanged) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const HostTensor q = random_tensor(Shape{1, 2, 37, 64}, Layout::bshd, q_like(), seed);
  const HostTensor k = random_tensor(Shape{1, 2, 300, 64}, Layout::bhsd, k_like(), seed + 1);
  const HostTensor v = random_tensor(Shape{1, 2, 300, 64}, Layout::bhsd, v_like(), seed + 2);
  const HostTensor k_smooth = subtract_channel_mean(k, 50);
  const std::vector<double> mean = channel_mean(k, 50);
  for (bool causal : {false, true}) {
    std::vector<double> lse_a, lse_b;
    const HostTensor a = reference_attention(q, k, v, AttentionConfig{causal, 0}, &lse_a);
    const HostTensor b = reference_attention(q, k_smooth, v, AttentionConfig{causal, 0}, &lse_b);
    const ErrorMetrics m = compare(a, b);
    EXPECT_LE(m.max_abs, 1e-12) << m.report();
    // lse_a = lse_b + scale * q·mean (rows in [b][h][s] order; GQA: query head h reads KV head h / 1).
    const double scale = 1.0 / std::sqrt(64.0);
    double worst = 0;
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 37; ++i) {
        double dot = 0;
        for (int c = 0; c < 64; ++c) dot += q.at(0, h, i, c) * mean[static_cast<size_t>(h) * 64 + c];
        const size_t row = static_cast<size_t>(h) * 37 + i;
        worst = std::max(worst, std::fabs(lse_a[row] - lse_b[row] - scale * dot));
      }
    EXPECT_LE(worst, 1e-9);
  }
}

}  // namespace
}  // namespace test
}  // namespace qattn

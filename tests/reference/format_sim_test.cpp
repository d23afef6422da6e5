// The accuracy-table simulator (reference/format_sim.hpp): its quantizers, group maps, FP8/fp16 rounding,
// and the smoothing identities it relies on, all in float64.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "reference/attention.hpp"
#include "reference/format_sim.hpp"

namespace qattn::reference::sim {
namespace {

const Gran kAll[] = {Gran::per_tensor, Gran::per_block, Gran::per_warp, Gran::per_thread, Gran::per_token};

Mat outlier_matrix(int rows, std::uint64_t seed) {
  Outliers o;
  o.scaled = {3, 40};
  o.biased = {7, 90};
  o.bias_lo = 5, o.bias_hi = 20;
  return random_matrix(rows, 128, Dist::normal, o, seed, seed + 1);
}

TEST(AccuracySim, QuantizersRoundTripWithinHalfAScale) {
  const Mat x = outlier_matrix(300, 1);   // 300: ragged last block / warp / thread tile
  for (Role role : {Role::q, Role::k})
    for (Gran g : kAll)
      for (int qmax : {127, 7}) {
        SCOPED_TRACE(std::string(to_string(g)) + (role == Role::q ? " Q" : " K") + " qmax=" + std::to_string(qmax));
        const Quantized qz = quantize_int(x, g, role, qmax);
        for (int r = 0; r < x.rows; ++r) {
          const double s = qz.scales[static_cast<size_t>(scale_group(g, role, r))];
          for (int c = 0; c < x.cols; ++c) {
            const int code = qz.codes[static_cast<size_t>(r) * x.cols + c];
            ASSERT_LE(std::abs(code), qmax);
            ASSERT_LE(std::fabs(x.at(r, c) - qz.deq.at(r, c)), s / 2 * (1 + 1e-12)) << "r=" << r << " c=" << c;
            ASSERT_EQ(qz.deq.at(r, c), code * s);
          }
        }
        // The group's largest element maps onto +-qmax exactly: the full range is used.
        for (size_t gi = 0; gi < qz.scales.size(); ++gi) EXPECT_GT(qz.scales[gi], 0);
      }
}

TEST(AccuracySim, Int4CodesStayInMinus7To7) {
  const Mat x = outlier_matrix(256, 2);
  std::set<int> seen;
  for (Gran g : kAll)
    for (int code : quantize_int(x, g, Role::k, 7).codes) {
      ASSERT_GE(code, -7);
      ASSERT_LE(code, 7);
      seen.insert(code);
    }
  EXPECT_TRUE(seen.count(7) && seen.count(-7)) << "both ends reached";
  EXPECT_FALSE(seen.count(-8)) << "-8 is unused (SageAttention2 §2.2)";
}

TEST(AccuracySim, AllZeroGroupsGiveScaleZeroAndNoNaN) {
  Mat x = outlier_matrix(128, 3);
  for (int c = 0; c < x.cols; ++c) x.at(5, c) = 0;                    // one zero token
  for (int r = 64; r < 128; ++r)
    for (int c = 0; c < x.cols; ++c) x.at(r, c) = 0;                  // a zero 64-key block
  const Quantized tok = quantize_int(x, Gran::per_token, Role::q, 127);
  EXPECT_EQ(tok.scales[5], 0.0);
  const Quantized blk = quantize_int(x, Gran::per_block, Role::k, 7);
  EXPECT_EQ(blk.scales[1], 0.0);
  for (const Quantized* q : {&tok, &blk})
    for (size_t i = 0; i < q->deq.v.size(); ++i) ASSERT_TRUE(std::isfinite(q->deq.v[i]));
  const Quantized zero = quantize_int(Mat(64, 128), Gran::per_tensor, Role::q, 7);
  EXPECT_EQ(zero.scales[0], 0.0);
  for (int code : zero.codes) ASSERT_EQ(code, 0);
  // Through a whole pipeline: an all-zero Q row attends uniformly, no NaN.
  Mat q = outlier_matrix(128, 4), k = outlier_matrix(128, 5), v = outlier_matrix(128, 6);
  for (int c = 0; c < q.cols; ++c) q.at(0, c) = 0;
  SimConfig cfg;
  cfg.qk_qmax = 7, cfg.gran = Gran::per_thread, cfg.smooth_k = true, cfg.p = PFormat::e4m3_scaled, cfg.v = VFormat::e4m3_per_channel;
  const Mat o = simulate_attention(q, k, v, {0, 1}, 1 / std::sqrt(128.0), cfg);
  for (double y : o.v) ASSERT_TRUE(std::isfinite(y));
}

TEST(AccuracySim, GroupMapsFollowTheMmaFragments) {
  // per_thread Q: rows t, t+8, t+16, t+24 of a 32-row warp tile share group t; the next tile starts at 8.
  for (int t = 0; t < 8; ++t)
    for (int i = 0; i < 4; ++i) EXPECT_EQ(scale_group(Gran::per_thread, Role::q, t + 8 * i), t);
  EXPECT_EQ(scale_group(Gran::per_thread, Role::q, 32), 8);
  // per_thread K: keys 8i + 2t and 8i + 2t + 1 of a 64-key tile share group t (4 groups per tile).
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(scale_group(Gran::per_thread, Role::k, 8 * i + 2 * t), t);
      EXPECT_EQ(scale_group(Gran::per_thread, Role::k, 8 * i + 2 * t + 1), t);
    }
  EXPECT_EQ(scale_group(Gran::per_thread, Role::k, 64), 4);
  EXPECT_EQ(scale_group(Gran::per_warp, Role::q, 31), 0);
  EXPECT_EQ(scale_group(Gran::per_warp, Role::q, 32), 1);
  EXPECT_EQ(scale_group(Gran::per_warp, Role::k, 63), 0) << "K per-warp = per 64-key block (Algorithm 1)";
  EXPECT_EQ(scale_group(Gran::per_block, Role::q, 127), 0);
  EXPECT_EQ(scale_group(Gran::per_block, Role::q, 128), 1);
  EXPECT_EQ(scale_group(Gran::per_block, Role::k, 64), 1);
}

TEST(AccuracySim, E4m3AndFp16Rounding) {
  EXPECT_EQ(round_e4m3(448), 448);
  EXPECT_EQ(round_e4m3(1000), 448) << "satfinite";
  EXPECT_EQ(round_e4m3(-1000), -448);
  EXPECT_EQ(round_e4m3(1.0625), 1.0) << "tie between 1 and 1.125 goes to the even mantissa";
  EXPECT_EQ(round_e4m3(1.1875), 1.25);
  EXPECT_EQ(round_e4m3(std::ldexp(1.0, -9)), std::ldexp(1.0, -9)) << "smallest subnormal";
  EXPECT_EQ(round_e4m3(std::ldexp(1.0, -11)), 0.0);
  EXPECT_EQ(round_e4m3(0.3), 0.3125);
  EXPECT_EQ(round_fp16(1 + std::ldexp(1.0, -11)), 1.0);
  EXPECT_EQ(round_fp16(65504), 65504);
  EXPECT_TRUE(std::isinf(round_fp16(70000)));
  EXPECT_EQ(round_fp16(std::ldexp(1.0, -24)), std::ldexp(1.0, -24));
  // Every e4m3 result is on the grid: 3 mantissa bits.
  for (double x = -500; x < 500; x += 0.37) {
    const double r = round_e4m3(x);
    int e = 0;
    const double f = std::frexp(std::fabs(r), &e);
    if (r != 0 && std::fabs(r) >= std::ldexp(1.0, -6)) {
      EXPECT_EQ(f * 16, std::floor(f * 16)) << x;
    }
    EXPECT_LE(std::fabs(r), 448);
  }
}

// e4m3 codes per scale group (qk=fp8e4m3): the groups and abs-maxes of the integer quantizer, scale amax /
// 448, every value on its group's e4m3 grid within half a step of x / scale.
TEST(AccuracySim, E4m3GroupsFollowTheGranularity) {
  Mat x(128, 16);
  for (int r = 0; r < x.rows; ++r)
    for (int c = 0; c < x.cols; ++c) x.at(r, c) = std::sin(0.7 * r + 1.3 * c) * (1 + r % 5) * (c == 3 ? 20 : 1);
  for (Gran g : {Gran::per_tensor, Gran::per_block, Gran::per_warp, Gran::per_thread, Gran::per_token})
    for (Role role : {Role::q, Role::k}) {
      SCOPED_TRACE(std::string(to_string(g)) + (role == Role::q ? " q" : " k"));
      const Mat y = quantize_e4m3(x, g, role, 64);
      const Quantized ints = quantize_int(x, g, role, 127, 64);
      for (int r = 0; r < x.rows; ++r)
        for (int c = 0; c < x.cols; ++c) {
          const double scale = ints.scales[static_cast<size_t>(scale_group(g, role, r, 64))] * 127 / 448;
          ASSERT_GT(scale, 0);
          const double code = y.at(r, c) / scale;
          EXPECT_NEAR(round_e4m3(code), code, 1e-9 * (1 + std::fabs(code))) << r << " " << c;
          EXPECT_LE(std::fabs(code), 448 * (1 + 1e-12));
          EXPECT_NEAR(code, x.at(r, c) / scale, std::max(std::ldexp(1.0, -10), std::fabs(x.at(r, c) / scale) / 16) + 1e-12);
        }
    }
  // A coarser group costs more: per-token error below per-tensor's on this channel-outlier data.
  double err_token = 0, err_tensor = 0;
  const Mat t = quantize_e4m3(x, Gran::per_token, Role::q), w = quantize_e4m3(x, Gran::per_tensor, Role::q);
  for (size_t i = 0; i < x.v.size(); ++i) err_token += std::fabs(t.v[i] - x.v[i]), err_tensor += std::fabs(w.v[i] - x.v[i]);
  EXPECT_LT(err_token, err_tensor);
}

TEST(AccuracySim, KSmoothingLeavesSoftmaxUnchanged) {
  const Mat q = outlier_matrix(64, 7), k = outlier_matrix(200, 8);
  const std::vector<int> rows = {0, 13, 63};
  const double scale = 1 / std::sqrt(128.0);
  const Mat a = softmax_scores(q, k, rows, scale);
  const Mat b = softmax_scores(q, subtract(k, channel_mean(k)), rows, scale);
  for (size_t i = 0; i < a.v.size(); ++i) ASSERT_NEAR(a.v[i], b.v[i], 1e-12 + 1e-9 * a.v[i]);
}

TEST(AccuracySim, ExactConfigsMatchTheReferenceAndSmoothingIsExactUnquantized) {
  const Mat q = outlier_matrix(300, 9), k = outlier_matrix(260, 10), v = outlier_matrix(260, 11);
  const std::vector<int> rows = {0, 1, 127, 128, 299};
  const double scale = 1 / std::sqrt(128.0);
  const Mat ref = reference_attention(q, k, v, rows, scale);
  for (int mask = 0; mask < 8; ++mask) {
    SimConfig cfg;   // no quantization: the online softmax over ragged tiles, Q/K/V smoothing
    cfg.smooth_k = mask & 1, cfg.smooth_q = mask & 2, cfg.smooth_v = mask & 4;
    const Errors e = compare(ref, simulate_attention(q, k, v, rows, scale, cfg));
    EXPECT_LT(e.rel_l1, 1e-12) << "smoothing mask " << mask;
  }
  SimConfig int8;
  int8.qk_qmax = 127, int8.gran = Gran::per_token, int8.smooth_k = true;
  const Errors e = compare(ref, simulate_attention(q, k, v, rows, scale, int8));
  EXPECT_GT(e.cosine, 0.999);
  EXPECT_GT(e.rel_l1, 0) << "quantization does change something";
}

TEST(AccuracySim, CausalMaskAlignsBottomRightLikeTheReference) {
  const Mat q = outlier_matrix(77, 12), k = outlier_matrix(203, 13), v = outlier_matrix(203, 14);
  std::vector<int> rows;
  for (int r = 0; r < q.rows; ++r) rows.push_back(r);
  const double scale = 1 / std::sqrt(128.0);
  auto operand = [](const Mat& m) { return reference::Operand::of(m.v.data(), {0, 0, m.cols, 1}); };
  std::vector<reference::RowId> ids;
  for (int r : rows) ids.push_back({0, 0, r});
  Mat ref(q.rows, v.cols);
  ref.v = reference::attention_rows(operand(q), operand(k), operand(v), {1, 1, 1, q.rows, k.rows, 128, 128}, {true, scale}, ids);
  SimConfig cfg;
  cfg.causal = true;
  cfg.block_kv = 32;   // tiles cut by the diagonal
  EXPECT_LT(compare(ref, simulate_attention(q, k, v, rows, scale, cfg)).rel_l1, 1e-12);
  cfg.causal = false;
  EXPECT_GT(compare(ref, simulate_attention(q, k, v, rows, scale, cfg)).rel_l1, 1e-3) << "the mask does something";
  // More queries than keys: the first rows see no key and give 0, as in the reference.
  const Mat q2 = outlier_matrix(40, 15), k2 = outlier_matrix(30, 16), v2 = outlier_matrix(30, 17);
  cfg.causal = true;
  const Mat o = simulate_attention(q2, k2, v2, {0, 9, 10, 39}, scale, cfg);
  for (int c = 0; c < o.cols; ++c) {
    EXPECT_EQ(o.at(0, c), 0.0);
    EXPECT_EQ(o.at(1, c), 0.0);
  }
  EXPECT_NE(o.at(2, 0), 0.0);
}

TEST(AccuracySim, Int8PerChannelVKeepsEachChannelWithinHalfItsScale) {
  const Mat q = outlier_matrix(64, 18), k = outlier_matrix(64, 19), v = outlier_matrix(64, 20);
  const std::vector<int> rows = {0, 5, 63};
  SimConfig exact, int8v;
  int8v.v = VFormat::int8_per_channel;
  const double scale = 1 / std::sqrt(128.0);
  const Errors e = compare(simulate_attention(q, k, v, rows, scale, exact), simulate_attention(q, k, v, rows, scale, int8v));
  EXPECT_GT(e.cosine, 0.9999);
  EXPECT_GT(e.rel_l1, 0);
}

TEST(AccuracySim, DeltaSFromTheCodesIsExactWithoutQuantizationAndCostsMoreWithInt4) {
  Outliers o;
  o.biased = {3, 40, 77, 100};   // Q channels with offsets: large block means
  o.bias_lo = 5, o.bias_hi = 20;
  const Mat q = random_matrix(128, 128, Dist::normal, o, 21, 22), k = outlier_matrix(192, 23), v = outlier_matrix(192, 24);
  std::vector<int> rows;
  for (int r = 0; r < q.rows; r += 5) rows.push_back(r);
  const double scale = 1 / std::sqrt(128.0);
  const Mat ref = reference_attention(q, k, v, rows, scale);
  for (bool rotate : {false, true}) {
    SimConfig exact;
    exact.smooth_q = exact.smooth_k = exact.delta_s_from_codes = true;
    exact.rotate = rotate;
    EXPECT_LT(compare(ref, simulate_attention(q, k, v, rows, scale, exact)).rel_l1, 1e-12) << "rotate " << rotate;
    SimConfig int4 = exact, int4_exact_ds = exact;
    int4.qk_qmax = int4_exact_ds.qk_qmax = 7;
    int4_exact_ds.delta_s_from_codes = false;
    EXPECT_LT(compare(ref, simulate_attention(q, k, v, rows, scale, int4)).cosine,
              compare(ref, simulate_attention(q, k, v, rows, scale, int4_exact_ds)).cosine) << "rotate " << rotate;
  }
}

}  // namespace
}  // namespace qattn::reference::sim

// The linear-layer inflection search (include/qattn/linear_inflection.hpp) on synthetic curves through a
// fake LinearTimer: M1 <= M2 on noisy and non-monotonic curves, failed points never chosen, split counts
// kept per path, the O(1) dispatch's boundaries, and the JSON form (round trip and one-line refusals).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "qattn/error.hpp"
#include "qattn/linear.hpp"
#include "qattn/linear_inflection.hpp"
#include "generator/search_space.hpp"
#include "qattn/validate.hpp"
#include "tests/common/expect_error.hpp"

namespace qattn {
namespace {

const Spec kFamily = parse_spec("linear a=fp16 w=int4:per_group out=fp16 n=4096 k=4096 arch=sm_90a");

// A model of the three dataflows: gemv cost grows with every token, flat in steps of 16 tokens from a
// higher base, gemm from a higher base still but slowly. Splits help below ~16 CTAs' worth; noise and
// failures on request.
class FakeTimer final : public LinearTimer {
 public:
  double noise = 0;
  std::map<std::pair<Dataflow, int>, bool> fail;   // (flow, m) that fail
  std::mt19937 rng{7};
  int calls = 0;
  bool prefer_narrow_flat = false;   // flat tiles of 64 channels 5 % faster than the untuned 128
  std::vector<std::pair<int, Tiling>> timed;   // (m, tiling) of every call

  double time_us(const Spec& s, const Tiling& t, int m, int splits) override {
    ++calls;
    timed.emplace_back(m, t);
    EXPECT_NE(s.flow, Dataflow::automatic);
    EXPECT_GE(t.block_m, 1);
    if (fail.count({s.flow, m})) throw Error(ErrorKind::failure, "launch failed");
    double us = s.flow == Dataflow::gemv ? 10.0 * m : s.flow == Dataflow::flat ? 30.0 + 2.0 * ((m + 15) / 16) : 80.0 + 0.05 * m;
    us *= splits == 4 ? 0.9 : 1.0;   // the split count this model likes
    if (prefer_narrow_flat && s.flow == Dataflow::flat && t.block_n == 64) us *= 0.95;
    std::uniform_real_distribution<double> u(-noise, noise);
    return us * (1.0 + u(rng));
  }
};

TEST(LinearSweep, FindsM1AndM2AndTheBestSplits) {
  FakeTimer timer;
  const LinearTable t = sweep_linear(kFamily, LinearSweepOptions{}, timer);
  EXPECT_EQ(t.family, "linear a=fp16 w=int4:per_group out=fp16 n=4096 k=4096 arch=sm_90a");
  // gemv wins while 10m < 30 + 2: m <= 3; flat while 32 + 2m/16 < 80 + 0.05m.
  EXPECT_EQ(t.m1(), 4);
  EXPECT_GT(t.m2(), 256);
  EXPECT_LE(t.m2(), 1024);
  for (size_t k = 0; k < 3; ++k)
    for (size_t i = 0; i < t.rows.size(); ++i)
      if (std::isfinite(t.us[k][i])) EXPECT_EQ(t.splits[k][i], 4) << k << " " << t.rows[i];
  // gemv is not timed past 64 tokens, flat past 1024: those points failed (NaN), never chosen.
  for (size_t i = 0; i < t.rows.size(); ++i) {
    EXPECT_EQ(std::isnan(t.us[0][i]), t.rows[i] > 64) << t.rows[i];
    EXPECT_EQ(std::isnan(t.us[1][i]), t.rows[i] > 1024) << t.rows[i];
  }
  const LinearDispatch d(t);
  EXPECT_EQ(d.choose(1).flow, Dataflow::gemv);
  EXPECT_EQ(d.choose(t.m1() - 1).flow, Dataflow::gemv);
  EXPECT_EQ(d.choose(t.m1()).flow, Dataflow::flat);
  EXPECT_EQ(d.choose(t.m2() - 1).flow, Dataflow::flat);
  EXPECT_EQ(d.choose(t.m2()).flow, Dataflow::gemm);
  EXPECT_EQ(d.choose(1 << 20).flow, Dataflow::gemm);   // past the table: its last choice
  EXPECT_EQ(d.choose(0).flow, Dataflow::gemv);
  EXPECT_EQ(d.choose(7).splits, 4);
}

TEST(LinearSweep, TheFastestTilingOfEachPointIsKeptAndDispatchedWhereItsRowsFit) {
  FakeTimer timer;
  timer.prefer_narrow_flat = true;
  const LinearTable t = sweep_linear(kFamily, LinearSweepOptions{}, timer);
  // Every timed tiling has the rows per CTA its point takes, and more than one was timed per point.
  std::map<std::pair<int, int>, std::set<int>> widths;   // (m, bm) -> bn timed
  for (const auto& [m, tiling] : timer.timed) widths[{m, tiling.block_m}].insert(tiling.block_n);
  for (const auto& [m, tiling] : timer.timed) {
    const bool ok = tiling.block_m == gen::linear_block_m(Dataflow::gemv, m) ||
                    tiling.block_m == gen::linear_block_m(Dataflow::flat, m) ||
                    tiling.block_m == gen::linear_block_m(Dataflow::gemm, m);
    EXPECT_TRUE(ok) << m << " " << to_string(tiling);
  }
  EXPECT_GE((widths[{8, 8}].size()), 2u);
  for (size_t i = 0; i < t.rows.size(); ++i) {
    if (!std::isfinite(t.us[1][i])) continue;
    EXPECT_EQ(t.tilings[1][i].block_n, 64) << t.rows[i];
    EXPECT_EQ(t.tilings[1][i].block_m, gen::linear_block_m(Dataflow::flat, t.rows[i])) << t.rows[i];
  }
  const LinearDispatch d(t);
  ASSERT_EQ(d.choose(8).flow, Dataflow::flat);
  EXPECT_EQ(d.choose(8).tiling, t.tilings[1][5]);   // rows 1, 2, 3, 4, 6, 8: the point of m 8
  EXPECT_EQ(d.choose(8).tiling.block_n, 64);
  // m 9 is served by the point of m 8 (bm 8), whose rows do not hold 9 tokens: the untuned rule decides.
  EXPECT_EQ(d.choose(9).flow, Dataflow::flat);
  EXPECT_EQ(d.choose(9).tiling.block_m, 0);
  EXPECT_EQ(d.choose(12).tiling.block_m, 16);
  EXPECT_EQ(d.choose(12).tiling.block_n, 64);

  // One tiling per point: the untuned one, as before.
  FakeTimer one;
  one.prefer_narrow_flat = true;
  LinearSweepOptions o;
  o.tilings_per_point = 1;
  const LinearTable u = sweep_linear(kFamily, o, one);
  for (size_t i = 0; i < u.rows.size(); ++i)
    if (std::isfinite(u.us[1][i])) EXPECT_EQ(u.tilings[1][i], gen::linear_tiling(parse_spec(
        "linear a=fp16 w=int4:per_group out=fp16 n=4096 k=4096 flow=flat arch=sm_90a"), u.rows[i], default_limits(Arch::sm_90a)));
  EXPECT_LT(one.calls, timer.calls);
}

TEST(LinearSweep, NoiseAndFailuresNeverBreakM1BeforeM2) {
  for (int seed = 0; seed < 50; ++seed) {
    FakeTimer timer;
    timer.noise = 0.6;
    timer.rng.seed(seed);
    timer.fail[{Dataflow::flat, 8}] = true;
    timer.fail[{Dataflow::gemm, 256}] = true;
    const LinearTable t = sweep_linear(kFamily, LinearSweepOptions{}, timer);
    ASSERT_EQ(t.choice.crossings.size(), 2u);
    EXPECT_LE(t.m1(), t.m2()) << seed;
    for (size_t i = 1; i < t.choice.chosen.size(); ++i) EXPECT_LE(t.choice.chosen[i - 1], t.choice.chosen[i]) << seed;
    // A failed point is never served by the path that failed there.
    for (size_t i = 0; i < t.rows.size(); ++i) {
      if (t.rows[i] == 8) EXPECT_NE(t.choice.chosen[i], 1) << seed;
      if (t.rows[i] == 256) EXPECT_NE(t.choice.chosen[i], 2) << seed;
    }
    const LinearDispatch d(t);
    for (int m = 1; m < 9000; m += 37) {
      const Dataflow f = d.choose(m).flow;
      EXPECT_EQ(f, m < t.m1() ? Dataflow::gemv : m < t.m2() ? Dataflow::flat : Dataflow::gemm) << m;
    }
  }
}

TEST(LinearSweep, ReportShowsTheCurvesAndTheCrossings) {
  FakeTimer timer;
  const LinearTable t = sweep_linear(kFamily, LinearSweepOptions{}, timer);
  const std::string text = report_text(t);
  EXPECT_NE(text.find("M1 4, M2 " + std::to_string(t.m2())), std::string::npos) << text;
  EXPECT_NE(text.find("gemv 1-3, flat 4-"), std::string::npos) << text;
  const std::string svg = report_svg(t, "NVIDIA H100");
  size_t lines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++lines;
  EXPECT_EQ(lines, 3u);   // gemv, flat, gemm
  EXPECT_NE(svg.find(">M1 = 4<"), std::string::npos);
  EXPECT_NE(svg.find(">M2 = " + std::to_string(t.m2()) + "<"), std::string::npos);
  EXPECT_NE(svg.find("Linear dataflow: linear a=fp16 w=int4:per_group"), std::string::npos);
}

TEST(LinearSweep, RefusesWhatItCannotTime) {
  FakeTimer timer;
  test::expect_bad_input([&] { sweep_linear(parse_spec("decode qk=fp16 pv=fp16 out=fp16 d=128 arch=sm_90a"), {}, timer); },
                         "needs a linear spec");
  LinearSweepOptions none;
  none.rows = {0, 9000};
  test::expect_bad_input([&] { sweep_linear(kFamily, none, timer); }, "token counts in 1..8192");
  Spec no_arch = kFamily;
  no_arch.arch = Arch::unset;
  test::expect_bad_input([&] { sweep_linear(no_arch, {}, timer); }, "concrete arch");
  EXPECT_EQ(timer.calls, 0);
}

TEST(LinearSweep, JsonRoundTripsAndRefusesBrokenRows) {
  FakeTimer timer;
  timer.noise = 0.1;
  const LinearTable t = sweep_linear(kFamily, LinearSweepOptions{}, timer);
  const std::string text = dump_decision(t);
  const LinearTable back = parse_linear_table(text);
  EXPECT_EQ(back.family, t.family);
  EXPECT_EQ(back.rows, t.rows);
  EXPECT_EQ(back.splits, t.splits);
  EXPECT_EQ(back.tilings, t.tilings);
  EXPECT_EQ(back.choice.crossings, t.choice.crossings);
  EXPECT_EQ(back.choice.chosen, t.choice.chosen);
  for (size_t k = 0; k < 3; ++k)
    for (size_t i = 0; i < t.rows.size(); ++i)
      EXPECT_TRUE(std::isnan(t.us[k][i]) ? std::isnan(back.us[k][i]) : back.us[k][i] == t.us[k][i]);
  EXPECT_EQ(dump_decision(back), text);
  const auto broken = [&](auto&& edit, const std::string& needle) {
    nlohmann::json j = nlohmann::json::parse(text);
    edit(j);
    test::expect_bad_input([&] { parse_linear_table(j.dump()); }, needle);
  };
  broken([](auto& j) { j["family"] = "linear a=fp16 w=fp16 out=fp16 n=64 k=64 flow=gemv"; }, "canonical linear spec text without flow=");
  broken([](auto& j) { j["family"] = "decode qk=fp16 pv=fp16 out=fp16 d=128"; }, "is not a linear spec");
  broken([](auto& j) { j["rows"][1] = 1; }, "rows must be strictly ascending");
  broken([](auto& j) { j["us"].erase(2); }, "one array per dataflow");
  broken([](auto& j) { j["crossings"] = {100, 4}; }, "M1 <= M2");
  broken([](auto& j) { j["chosen"][0] = "mma"; }, "accepted: gemv, flat, gemm");
  broken([](auto& j) { j["splits"][0][0] = -1; }, "splits[0][0]");
  test::expect_bad_input([] { parse_linear_table("{not json"); }, "not valid JSON");
}

}  // namespace
}  // namespace qattn

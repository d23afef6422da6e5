// The inflection-point and split-K decisions on synthetic timings: crossings, noise, non-monotonic and
// failed curves, the dispatch tables, the JSON form and the sweep drivers with a fake DecodeTimer.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "qattn/error.hpp"
#include "qattn/inflection.hpp"

namespace qattn {
namespace {

const std::vector<int> kRows = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64};

// Curves whose ratio to each other grows as (M / crossing)^2, so that two grid steps (>= 1.44x in M^2)
// outweigh +-10% noise on both curves (1.1 / 0.9 = 1.22x) but one step may not.
std::vector<std::vector<double>> crossing_curves(double c1, double c2, std::mt19937* noise = nullptr) {
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  std::vector<std::vector<double>> us(3);
  for (int m : kRows) {
    const double mma16 = 100;
    const double gemv = mma16 * (m / c1) * (m / c1);
    const double mma32 = mma16 * (c2 / m) * (c2 / m);
    us[0].push_back(gemv * (noise ? jitter(*noise) : 1));
    us[1].push_back(mma16 * (noise ? jitter(*noise) : 1));
    us[2].push_back(mma32 * (noise ? jitter(*noise) : 1));
  }
  return us;
}

int grid_index(int m) {
  for (size_t i = 0; i < kRows.size(); ++i)
    if (kRows[i] >= m) return static_cast<int>(i);
  return static_cast<int>(kRows.size());
}

// Every monotone assignment, for checking the dynamic program on small instances.
double brute_force_cost(const std::vector<std::vector<double>>& cost, size_t i, int lowest) {
  if (i == cost.size()) return 0;
  double best = INFINITY;
  for (int k = lowest; k < static_cast<int>(cost[i].size()); ++k)
    best = std::min(best, cost[i][static_cast<size_t>(k)] + brute_force_cost(cost, i + 1, k));
  return best;
}

TEST(Inflection, CleanCrossingsAreFoundExactly) {
  const CrossingChoice c = find_crossings(kRows, crossing_curves(7, 22));
  ASSERT_EQ(c.crossings.size(), 2u);
  EXPECT_EQ(c.crossings[0], 8) << "gemv wins up to M 6 (6 < 7), mma_bm16 from M 8";
  EXPECT_EQ(c.crossings[1], 24) << "mma_bm32 wins from M 24 (> 22)";
  EXPECT_DOUBLE_EQ(c.cost, static_cast<double>(kRows.size())) << "the monotone choice is optimal at every point";
  for (size_t i = 0; i < kRows.size(); ++i) EXPECT_EQ(c.chosen[i], kRows[i] < 8 ? 0 : kRows[i] < 24 ? 1 : 2) << kRows[i];
}

TEST(Inflection, NoisyCrossingsStayWithinOneGridStep) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 300; ++trial) {
    // True crossings between grid points (geometric middles), e.g. 7.2 between 6 and 8.
    const CrossingChoice c = find_crossings(kRows, crossing_curves(7.2, 21.9, &rng));
    EXPECT_LE(std::abs(grid_index(c.crossings[0]) - grid_index(8)), 1) << "trial " << trial << " M1 " << c.crossings[0];
    EXPECT_LE(std::abs(grid_index(c.crossings[1]) - grid_index(24)), 1) << "trial " << trial << " M2 " << c.crossings[1];
  }
}

TEST(Inflection, OneNoisyPointCannotFlipTheDecision) {
  auto us = crossing_curves(7, 22);
  us[0][9] = 50;   // gemv looks 2x faster than mma_bm16 at M 16 once, deep in mma territory
  us[1][2] = 10;   // and mma_bm16 10x faster at M 3
  const CrossingChoice c = find_crossings(kRows, us);
  EXPECT_EQ(c.crossings[0], 8);
  EXPECT_EQ(c.crossings[1], 24);
}

TEST(Inflection, NonMonotonicCurvesGetOneCrossingPerPath) {
  // mma_bm16 pays for a second row block from M 17 on (a step), mma_bm32 is flat; gemv dips at M 10.
  std::vector<std::vector<double>> us(3);
  for (int m : kRows) {
    us[0].push_back(m == 10 ? 95.0 : 15.0 * m);
    us[1].push_back(m <= 16 ? 100.0 : m <= 32 ? 190.0 : 280.0);
    us[2].push_back(150.0);
  }
  const CrossingChoice c = find_crossings(kRows, us);
  EXPECT_EQ(c.crossings[0], 8) << "gemv 90 vs 100 at M 6, 120 at M 8; the dip at M 10 is outvoted";
  EXPECT_EQ(c.crossings[1], 20) << "the step at M 17 hands over to mma_bm32";
  EXPECT_LE(c.crossings[0], c.crossings[1]);
}

TEST(Inflection, APathThatNeverWinsGetsAnEmptyRange) {
  auto us = crossing_curves(7, 22);
  for (double& t : us[1]) t *= 10;   // mma_bm16 is always far behind
  const CrossingChoice c = find_crossings(kRows, us);
  EXPECT_EQ(c.crossings[0], c.crossings[1]) << "empty range for mma_bm16";
  for (int k : c.chosen) EXPECT_NE(k, 1);
  // A last path that never wins is never reached.
  auto us2 = crossing_curves(7, 22);
  for (double& t : us2[2]) t *= 10;
  EXPECT_EQ(find_crossings(kRows, us2).crossings[1], kNeverRows);
  // A first path that never wins: the next one serves from M 1 on.
  auto us3 = crossing_curves(7, 22);
  for (double& t : us3[0]) t = 1e4;
  EXPECT_EQ(find_crossings(kRows, us3).crossings[0], 1);
}

TEST(Inflection, FailedPointsAreAvoided) {
  auto us = crossing_curves(7, 22);
  for (double& t : us[2]) t = NAN;   // mma_bm32 cannot run at all
  CrossingChoice c = find_crossings(kRows, us);
  EXPECT_EQ(c.crossings[0], 8);
  EXPECT_EQ(c.crossings[1], kNeverRows);
  // gemv fails at M 4: taking it for M 1..3 would force mma_bm16 from 4 on anyway, so the crossing is 4.
  us = crossing_curves(7, 22);
  us[0][3] = NAN;
  c = find_crossings(kRows, us);
  EXPECT_EQ(c.crossings[0], 4);
  // A point where nothing ran carries no evidence and changes nothing.
  us = crossing_curves(7, 22);
  for (auto& curve : us) curve[9] = -1;
  c = find_crossings(kRows, us);
  EXPECT_EQ(c.crossings, (std::vector<int>{8, 24}));
  // Every path failed everywhere: path 0, not an error.
  std::vector<std::vector<double>> none(2, std::vector<double>(kRows.size(), NAN));
  EXPECT_EQ(find_crossings(kRows, none).crossings, (std::vector<int>{kNeverRows}));
}

TEST(Inflection, PropertyCrossingsAreOrderedAndTheProgramIsOptimal) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> time(1, 100);
  std::uniform_int_distribution<int> pick_paths(1, 4);
  std::bernoulli_distribution fails(0.1);
  const std::vector<int> rows = {1, 2, 4, 8, 16, 32, 64};
  for (int trial = 0; trial < 500; ++trial) {
    const size_t paths = static_cast<size_t>(pick_paths(rng));
    std::vector<std::vector<double>> us(paths);
    for (auto& curve : us)
      for (size_t i = 0; i < rows.size(); ++i) curve.push_back(fails(rng) ? NAN : time(rng));
    const CrossingChoice c = find_crossings(rows, us);
    ASSERT_EQ(c.crossings.size(), paths - 1);
    for (size_t k = 1; k < c.crossings.size(); ++k) ASSERT_LE(c.crossings[k - 1], c.crossings[k]) << "trial " << trial;
    for (size_t i = 1; i < rows.size(); ++i) ASSERT_LE(c.chosen[i - 1], c.chosen[i]);
    // The same costs the program uses, minimized over every monotone assignment.
    std::vector<std::vector<double>> cost(rows.size(), std::vector<double>(paths, 0));
    for (size_t i = 0; i < rows.size(); ++i) {
      double best = INFINITY;
      for (size_t k = 0; k < paths; ++k)
        if (std::isfinite(us[k][i])) best = std::min(best, us[k][i]);
      for (size_t k = 0; k < paths && std::isfinite(best); ++k)
        cost[i][k] = std::isfinite(us[k][i]) ? us[k][i] / best : kFailedPointCost;
    }
    ASSERT_NEAR(c.cost, brute_force_cost(cost, 0, 0), 1e-9 * c.cost) << "trial " << trial;
  }
}

TEST(Inflection, BadShapesAreRejected) {
  EXPECT_THROW(find_crossings(kRows, {}), Error);
  EXPECT_THROW(find_crossings({1, 2}, {{1.0}}), Error);
  EXPECT_THROW(find_crossings({2, 2}, {{1.0, 1.0}}), Error);
}

TEST(SplitChoice, FastestUnlessFewerSplitsAreWithinTolerance) {
  EXPECT_EQ(choose_splits({1, 2, 4, 8}, {100, 60, 40, 41}, 0.03), 4);
  EXPECT_EQ(choose_splits({1, 2, 4, 8}, {100, 60, 41, 40}, 0.03), 4) << "2.5% from the best: the fewer splits";
  EXPECT_EQ(choose_splits({1, 2, 4, 8}, {100, 60, 42, 40}, 0.03), 8) << "5% from the best is not noise";
  EXPECT_EQ(choose_splits({1, 2, 4}, {50, 50, 50}, 0.03), 1) << "ties: the fewest";
  EXPECT_EQ(choose_splits({1, 2, 4}, {NAN, 30, 20}, 0.0), 4);
  EXPECT_EQ(choose_splits({1, 2}, {NAN, -1}, 0.03), 0) << "every count failed";
  EXPECT_THROW(choose_splits({1, 2}, {1.0}, 0.03), Error);
  EXPECT_THROW(choose_splits({1}, {1.0}, 1.5), Error);
}

TEST(SplitChoice, NoisyTimesOfAPlateauPickTheFewestSplits) {
  std::mt19937 rng(99);
  std::uniform_real_distribution<double> jitter(0.99, 1.01);
  for (int trial = 0; trial < 100; ++trial) {
    // True times: 400/s until 16 splits, then flat at 25 (the GPU is full): +-1% noise must not pull
    // the choice past 16.
    std::vector<int> s = {1, 2, 4, 8, 16, 32, 64};
    std::vector<double> us;
    for (int n : s) us.push_back(std::max(400.0 / n, 25.0) * jitter(rng));
    EXPECT_EQ(choose_splits(s, us, 0.03), 16) << "trial " << trial;
  }
}

TEST(Buckets, Log2AndTexts) {
  EXPECT_EQ(log2_bucket(0), 0);
  EXPECT_EQ(log2_bucket(1), 0);
  EXPECT_EQ(log2_bucket(2), 1);
  EXPECT_EQ(log2_bucket(3), 2);
  EXPECT_EQ(log2_bucket(4096), 12);
  EXPECT_EQ(log2_bucket(4097), 13);
  EXPECT_EQ(kv_bucket_text(4096), "kv4096");
  EXPECT_EQ(split_bucket_text(64, 4096), "bh64_kv4096");
  const Spec s = parse_spec("decode qk=int4:per_token pv=int4:per_token out=bf16 d=128 gqa=4 splitk=8 flow=gemv arch=sm_90a");
  EXPECT_EQ(decode_family_key(s), "decode qk=int4:per_token pv=int4:per_token out=bf16 d=128 gqa=4 arch=sm_90a");
  EXPECT_THROW(decode_family_key(parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=128")), Error);
}

const Tiling kG1{1, 32, 4, 3}, kG2{2, 32, 4, 3}, kG4{4, 32, 4, 3}, kG8{8, 16, 8, 2}, kM16{16, 32, 4, 3}, kM32{32, 32, 4, 2};
const std::vector<DecodePath> kPaths = {{"gemv", Dataflow::gemv, {kG1, kG2, kG4, kG8}},
                                        {"mma_bm16", Dataflow::mma, {kM16}},
                                        {"mma_bm32", Dataflow::mma, {kM32}}};

InflectionTable table_with(std::vector<std::pair<int, std::vector<int>>> kv_crossings) {
  InflectionTable t;
  t.family = "decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 arch=sm_90a";
  t.paths = kPaths;
  for (auto& [kv, crossings] : kv_crossings) {
    DataflowBucket b;
    b.kv_len = kv;
    b.rows = {1, 8, 32};
    b.us.assign(3, std::vector<double>(3, 10.0));
    b.choice = find_crossings(b.rows, b.us);   // shapes only; the crossings are set below
    b.choice.crossings = crossings;
    for (size_t i = 0; i < b.rows.size(); ++i) {
      int k = 0;
      while (k < 2 && b.rows[i] >= crossings[static_cast<size_t>(k)]) ++k;
      b.choice.chosen[i] = k;
    }
    t.buckets.push_back(b);
  }
  return t;
}

TEST(Dispatch, BoundariesOfTheCrossings) {
  DecodeDispatch d;
  EXPECT_EQ(d.choose(4, 4096).tiling.block_m, 0) << "no decision: the runtime's choice";
  d.set_dataflow(table_with({{4096, {6, 24}}}));
  EXPECT_EQ(d.choose(5, 4096).flow, Dataflow::gemv);
  EXPECT_EQ(d.choose(5, 4096).tiling, kG8) << "gemv: the smallest tile holding the rows";
  EXPECT_EQ(d.choose(3, 4096).tiling, kG4);
  EXPECT_EQ(d.choose(1, 4096).tiling, kG1);
  EXPECT_EQ(d.choose(6, 4096).tiling, kM16) << "M exactly at M1 takes the next path";
  EXPECT_EQ(d.choose(23, 4096).tiling, kM16) << "M2 - 1 stays";
  EXPECT_EQ(d.choose(24, 4096).tiling, kM32) << "M exactly at M2";
  EXPECT_EQ(d.choose(64, 4096).flow, Dataflow::mma);
  EXPECT_EQ(d.choose(500, 4096).tiling, kM32) << "beyond the swept range: clamped to 64";
  EXPECT_EQ(d.choose(0, 4096).tiling, kG1) << "below it: clamped to 1";
}

TEST(Dispatch, KvLengthsUseTheNearestBucket) {
  DecodeDispatch d;
  d.set_dataflow(table_with({{1024, {4, 16}}, {16384, {10, 40}}}));
  EXPECT_EQ(d.choose(8, 1024).tiling, kM16);
  EXPECT_EQ(d.choose(8, 16384).tiling, kG8);
  EXPECT_EQ(d.choose(8, 100).tiling, kM16) << "shorter than every bucket: the smallest";
  EXPECT_EQ(d.choose(8, 1 << 30).tiling, kG8) << "longer than every bucket: the largest";
  EXPECT_EQ(d.choose(8, 4096).tiling, kM16) << "log2 12 is as near to 10 as to 14: the smaller";
  EXPECT_EQ(d.choose(8, 4097).tiling, kG8) << "log2 13 is nearer to 14";
  EXPECT_THROW(d.set_dataflow(InflectionTable{}), Error);
  EXPECT_EQ(d.choose(8, 16384).tiling, kG8) << "a rejected table leaves the dispatch as it was";
}

TEST(Dispatch, SplitsFromTheNearestCellInsideTheMeasuredRange) {
  SplitTable t;
  auto cell = [](long long bh, int kv, int chosen) {
    SplitCell c;
    c.batch_heads = bh, c.kv_len = kv, c.splits = {1}, c.us = {1.0}, c.chosen = chosen;
    return c;
  };
  t.cells = {cell(1, 1024, 8), cell(1, 65536, 64), cell(64, 1024, 1), cell(64, 65536, 0)};
  DecodeDispatch d;
  EXPECT_EQ(d.splits(1, 1024), 0);
  d.set_splits(t);
  EXPECT_TRUE(d.has_splits());
  EXPECT_EQ(d.splits(1, 1024), 8);
  EXPECT_EQ(d.splits(1, 1000), 8) << "1000 rounds up to the 1024 bucket";
  EXPECT_EQ(d.splits(1, 65536), 64);
  EXPECT_EQ(d.splits(2, 60000), 64) << "nearest measured cell";
  EXPECT_EQ(d.splits(64, 65536), 64)
      << "a cell whose counts all failed is not a decision; the two nearest tie (6 steps): the smaller bh";
  EXPECT_EQ(d.splits(64, 4096), 1) << "2 steps from bh 64 kv 1024, 8 from the others";
  EXPECT_EQ(d.splits(128, 4096), 0) << "more batch x heads than measured: the heuristic";
  EXPECT_EQ(d.splits(1, 1 << 20), 0) << "a KV length beyond the measured range: the heuristic";
  EXPECT_EQ(d.splits(1, 512), 0) << "below it too";
  EXPECT_EQ(d.splits(0, 4096), 0);
}

TEST(DecisionJson, RoundTrips) {
  auto us = crossing_curves(7, 22);
  us[2][0] = NAN;
  InflectionTable t;
  t.family = "decode qk=int4:per_token pv=int4:per_token out=bf16 d=128 arch=sm_90a";
  t.batch = 2;
  t.heads_kv = 4;
  t.paths = kPaths;
  t.buckets.push_back({4096, kRows, us, find_crossings(kRows, us)});
  const InflectionTable back = parse_inflection_table(dump_decision(t));
  EXPECT_EQ(back.family, t.family);
  EXPECT_EQ(back.batch, 2);
  EXPECT_EQ(back.heads_kv, 4);
  EXPECT_EQ(back.paths, t.paths);
  ASSERT_EQ(back.buckets.size(), 1u);
  EXPECT_EQ(back.buckets[0].rows, kRows);
  EXPECT_TRUE(std::isnan(back.buckets[0].us[2][0])) << "a failed point stays failed (null)";
  EXPECT_DOUBLE_EQ(back.buckets[0].us[0][5], us[0][5]);
  EXPECT_EQ(back.buckets[0].choice.crossings, t.buckets[0].choice.crossings);
  EXPECT_EQ(back.buckets[0].choice.chosen, t.buckets[0].choice.chosen);
  EXPECT_EQ(dump_decision(back), dump_decision(t));

  SplitTable s;
  s.family = t.family;
  s.q_len = 2;
  s.cells.push_back({16, 4096, Dataflow::gemv, kG4, {1, 2, 4}, {30, NAN, 20}, 4});
  const SplitTable sb = parse_split_table(dump_decision(s));
  EXPECT_EQ(sb.q_len, 2);
  EXPECT_DOUBLE_EQ(sb.tolerance, 0.03);
  ASSERT_EQ(sb.cells.size(), 1u);
  EXPECT_EQ(sb.cells[0].tiling, kG4);
  EXPECT_EQ(sb.cells[0].flow, Dataflow::gemv);
  EXPECT_EQ(sb.cells[0].chosen, 4);
  EXPECT_TRUE(std::isnan(sb.cells[0].us[1]));
  EXPECT_EQ(dump_decision(sb), dump_decision(s));
}

// Each edit must be refused with one line naming what is wrong.
TEST(DecisionJson, MalformedInputIsRefusedWithOneLine) {
  InflectionTable t = table_with({{4096, {6, 24}}});
  const nlohmann::json good = t;
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string mentions;
  };
  const std::vector<Case> cases = {
      {[](auto& j) { j["version"] = 2; }, "version is 2; accepted: 1"},
      {[](auto& j) { j["format"] = "qattn.decode_splits"; }, "format"},
      {[](auto& j) { j.erase("paths"); }, "paths is missing"},
      {[](auto& j) { j["family"] = "decode qk=int8 flow=gemv"; }, "family"},
      {[](auto& j) { j["family"] = "decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 flow=gemv arch=sm_90a"; },
       "without flow="},
      {[](auto& j) { j["paths"][0]["flow"] = "tensor"; }, "paths[0].flow is 'tensor'; accepted: mma, gemv"},
      {[](auto& j) { j["paths"][1]["tilings"][0] = "bm16"; }, "paths[1].tilings[0] is not a tiling"},
      {[](auto& j) { j["paths"][1]["name"] = "gemv"; }, "unique"},
      {[](auto& j) { j["buckets"][0]["kv"] = 5000; }, "buckets[0].kv is 5000; accepted: a power of two"},
      {[](auto& j) { j["buckets"][0]["rows"][1] = 1; }, "strictly ascending"},
      {[](auto& j) { j["buckets"][0]["rows"][2] = 65; }, "accepted: 1..64"},
      {[](auto& j) { j["buckets"][0]["us"][1][0] = "fast"; }, "buckets[0].us[1][0] must be a time"},
      {[](auto& j) { j["buckets"][0]["us"][1].erase(0); }, "one per row"},
      {[](auto& j) { j["buckets"][0]["crossings"] = {24, 6}; }, "non-decreasing"},
      {[](auto& j) { j["buckets"][0]["crossings"] = {6}; }, "one fewer than the paths"},
      {[](auto& j) { j["buckets"][0]["chosen"][1] = "gemv"; }, "but the crossings give 'mma_bm16' at M 8"},
      {[](auto& j) { j["buckets"][0]["chosen"][1] = "cuda"; }, "not one of the paths"},
      {[](auto& j) { j["buckets"] = nlohmann::json::array(); }, "at least one KV bucket"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = good;
    c.edit(j);
    try {
      parse_inflection_table(j.dump());
      ADD_FAILURE() << "accepted: " << j.dump();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::bad_input);
      const std::string what = e.what();
      EXPECT_NE(what.find(c.mentions), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      EXPECT_EQ(what.rfind("decode_dataflow JSON: ", 0), 0u) << what;
    }
  }
  EXPECT_THROW(parse_inflection_table("{\"format\": "), Error);
  EXPECT_THROW(parse_inflection_table("[]"), Error);
  try {
    parse_split_table(R"({"format":"qattn.decode_splits","version":1,"family":"decode qk=fp16 pv=fp16 out=fp16 d=128",
      "q_len":1,"tolerance":0.03,"cells":[{"bh":3,"kv":1024,"flow":"mma","tiling":"bm16_bn32_w4_s3","splits":[1],
      "us":[1],"chosen":1}]})");
    ADD_FAILURE() << "bh 3 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cells[0].bh is 3; accepted: a power of two"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_split_table(R"({"format":"qattn.decode_splits","version":1,"family":"decode qk=fp16 pv=fp16 out=fp16 d=128",
      "q_len":1,"tolerance":0.03,"cells":[{"bh":1,"kv":1024,"flow":"mma","tiling":"bm16_bn32_w4_s3","splits":[1,2],
      "us":[1,2],"chosen":4}]})"),
               Error)
      << "chosen must be one of the counts";
}

// Times from a model of the kernels, with counted calls and chosen failures.
class FakeTimer : public DecodeTimer {
 public:
  std::function<double(const Spec&, const Tiling&, const Problem&, int)> model;
  int calls = 0;
  std::vector<std::pair<Problem, int>> seen;
  double time_us(const Spec& spec, const Tiling& t, const Problem& p, int splits) override {
    ++calls;
    seen.push_back({p, splits});
    return model(spec, t, p, splits);
  }
};

const Spec kFamily = parse_spec("decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=2 arch=sm_90a");

TEST(Sweep, DataflowTimesEveryPointAndSurvivesFailures) {
  FakeTimer timer;
  timer.model = [](const Spec& s, const Tiling& t, const Problem& p, int splits) -> double {
    EXPECT_EQ(splits, 0) << "the dataflow sweep leaves the splits to the runtime";
    EXPECT_EQ(s.split_k, 0);
    const int m = 2 * p.q_len;
    if (s.flow == Dataflow::gemv && p.kv_len == 4096 && m == 40) throw std::runtime_error("launch failed");
    if (s.flow == Dataflow::gemv && m == 48) return NAN;
    if (s.flow == Dataflow::gemv) return 10.0 * m;
    return t.block_m == 16 ? 60.0 + (m > 16 ? 100 : 0) : 120.0;
  };
  SweepOptions o;
  o.kv_lens = {4096, 1024};
  o.paths = kPaths;
  int progress_calls = 0, last_total = 0;
  o.progress = [&](int done, int total, const std::string& what) {
    ++progress_calls;
    last_total = total;
    EXPECT_EQ(done, progress_calls);
    EXPECT_FALSE(what.empty());
  };
  const InflectionTable t = sweep_dataflow(kFamily, o, timer);
  const std::vector<int> even = {2, 4, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64};
  EXPECT_EQ(timer.calls, 2 * 3 * 13) << "kv buckets x paths x the M that gqa=2 can make";
  EXPECT_EQ(progress_calls, timer.calls);
  EXPECT_EQ(last_total, timer.calls);
  EXPECT_EQ(t.family, decode_family_key(kFamily));
  ASSERT_EQ(t.buckets.size(), 2u);
  EXPECT_EQ(t.buckets[0].kv_len, 1024) << "ascending";
  EXPECT_EQ(t.buckets[1].rows, even);
  EXPECT_TRUE(std::isnan(t.buckets[1].us[0][10])) << "the throwing point is recorded as failed";
  EXPECT_FALSE(std::isnan(t.buckets[0].us[0][10]));
  EXPECT_TRUE(std::isnan(t.buckets[0].us[0][11]));
  for (const DataflowBucket& b : t.buckets) EXPECT_EQ(b.choice.crossings, (std::vector<int>{8, 20}));
  for (const auto& [p, splits] : timer.seen) {
    EXPECT_EQ(p.heads_q, 2 * p.heads_kv);
    EXPECT_EQ(p.heads_kv, 8);
  }
  // The table dispatches what was measured.
  DecodeDispatch d;
  d.set_dataflow(t);
  EXPECT_EQ(d.choose(6, 3000).flow, Dataflow::gemv);
  EXPECT_EQ(d.choose(16, 3000).tiling, kM16);
  EXPECT_EQ(d.choose(20, 3000).tiling, kM32);
}

TEST(Sweep, NoGpuEndsTheSweepAndBadOptionsAreRefused) {
  FakeTimer timer;
  timer.model = [](const Spec&, const Tiling&, const Problem&, int) -> double {
    throw Error(ErrorKind::no_gpu, "no CUDA device");
  };
  SweepOptions o;
  o.paths = kPaths;
  EXPECT_THROW(sweep_dataflow(kFamily, o, timer), Error);
  EXPECT_EQ(timer.calls, 1);
  o.kv_lens = {3000};
  EXPECT_THROW(sweep_dataflow(kFamily, o, timer), Error);
  o.kv_lens = {4096};
  o.rows = {1, 3, 5};
  EXPECT_THROW(sweep_dataflow(kFamily, o, timer), Error) << "no M is a multiple of gqa=2";
  EXPECT_THROW(sweep_dataflow(parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=128"), SweepOptions{}, timer), Error);
}

TEST(Sweep, DefaultPathsComeFromTheSearchSpace) {
  const std::vector<DecodePath> paths = decode_paths(kFamily, default_limits(Arch::sm_90a));
  ASSERT_GE(paths.size(), 2u);
  EXPECT_EQ(paths[0].name, "gemv");
  EXPECT_EQ(paths[0].flow, Dataflow::gemv);
  for (size_t i = 1; i < paths[0].tilings.size(); ++i) EXPECT_LT(paths[0].tilings[i - 1].block_m, paths[0].tilings[i].block_m);
  EXPECT_EQ(paths[1].name, "mma_bm16");
  EXPECT_EQ(paths[1].tilings.at(0).block_m, 16);
  Spec unset = kFamily;
  unset.arch = Arch::unset;
  EXPECT_THROW(decode_paths(unset, default_limits(Arch::sm_90a)), Error);
}

TEST(Sweep, SplitsUseTheDispatchedKernelAndPreferFewerSplits) {
  FakeTimer dataflow_timer;
  dataflow_timer.model = [](const Spec& s, const Tiling& t, const Problem& p, int) -> double {
    const int m = 2 * p.q_len;
    return s.flow == Dataflow::gemv ? 10.0 * m : t.block_m == 16 ? 60.0 : 120.0;
  };
  SweepOptions o;
  o.paths = kPaths;
  o.kv_lens = {1024, 65536};
  o.batch_heads = {1, 256};
  o.splits = {1, 2, 4, 8, 16, 32, 64, 128};
  const InflectionTable flow = sweep_dataflow(kFamily, o, dataflow_timer);

  FakeTimer timer;
  // Splits pay until the 132 SMs are busy, then gain 0.4% per doubling (noise level); one count fails.
  timer.model = [](const Spec& s, const Tiling& t, const Problem& p, int splits) -> double {
    EXPECT_EQ(s.flow, Dataflow::gemv) << "M = gqa x q_len = 2 is gemv territory";
    EXPECT_EQ(t, kG2);
    if (splits == 8 && p.kv_len == 65536) return NAN;
    const double units = static_cast<double>(p.batch) * p.heads_kv;
    const double busy = std::min(1.0, units * splits / 132.0);
    return p.kv_len / 100.0 / busy * (1 - 0.004 * std::log2(splits));
  };
  o.q_len = 1;
  const SplitTable s = sweep_splits(kFamily, o, timer, &flow);
  ASSERT_EQ(s.cells.size(), 4u);
  // kv 1024 allows counts up to 4 (256 tokens each), kv 65536 all 8.
  EXPECT_EQ(timer.calls, 2 * (3 + 8));
  EXPECT_EQ(s.cells[0].splits, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(s.cells[0].chosen, 4) << "bh 1, kv 1024: every split helps";
  EXPECT_EQ(s.cells[1].chosen, 128) << "bh 1, kv 64k: 128 x 1 CTA is still < 132";
  EXPECT_EQ(s.cells[2].chosen, 1) << "bh 256 fills the GPU: 4 splits are 0.8% faster, within 3%";
  EXPECT_EQ(s.cells[3].chosen, 1) << "bh 256, kv 64k: 128 splits are 2.8% faster, still within 3%";
  EXPECT_TRUE(std::isnan(s.cells[3].us[3]));
  EXPECT_TRUE(std::isnan(s.cells[1].us[3]));
  DecodeDispatch d;
  d.set_splits(s);
  EXPECT_EQ(d.splits(256, 65536), 1);
  EXPECT_EQ(d.splits(1, 65536), 128);
  EXPECT_EQ(d.splits(1, 2000), 4) << "kv 2048: nearest of 1024 / 65536 is 1024";
}

}  // namespace
}  // namespace qattn

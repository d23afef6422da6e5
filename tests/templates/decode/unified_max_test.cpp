// softmax=unified_max (FlashDecoding++) on the CPU: the float64 host model of the rule the decode
// kernel implements (tests/common/unified_max_reference.*), the calibration of phi, and the checks
// decode() applies before it needs a GPU.
//
// Convention under test (include/qattn/unified_max.hpp): a row falls back when some unmasked
// x - phi >= hi (overflow, element-wise) or when no unmasked x - phi > lo (underflow, judged on the
// row's maximum); masked scores never count.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "qattn/abi.h"
#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "qattn/unified_max.hpp"
#include "tests/common/unified_max_reference.hpp"

namespace qattn {
namespace {

using test::SoftmaxRow;

constexpr double kInf = std::numeric_limits<double>::infinity();

// The paper's Fig. 6 parameters.
constexpr double kA = -3, kB = 3, kPhi = 6;

std::vector<double> values(int n, int dv, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(n) * dv);
  for (double& x : v) x = dist(rng);
  return v;
}

// softmax(x) . v straight from the definition (no splits, no max: the scores here are small).
std::vector<double> direct_softmax(const std::vector<double>& x, const std::vector<double>& v, int dv) {
  std::vector<double> o(static_cast<size_t>(dv), 0.0);
  double l = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double p = std::exp(x[i]);
    l += p;
    for (int c = 0; c < dv; ++c) o[static_cast<size_t>(c)] += p * v[i * dv + c];
  }
  for (double& y : o) y /= l;
  return o;
}

void expect_near_rel(const std::vector<double>& got, const std::vector<double>& want, double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rel * std::max(1.0, std::fabs(want[i]))) << what << " [" << i << "]";
}

TEST(UnifiedMaxModel, PaperCleanRowMatchesTheExactSoftmax) {
  const std::vector<double> x = {4, 5, 6, 7};   // x - phi = -2, -1, 0, 1: inside (-3, 3)
  const std::vector<double> v = values(4, 3, 1);
  const SoftmaxRow r = test::unified_max_row(x, v, 3, kPhi, kA, kB, 2);
  EXPECT_EQ(r.flags, kUmSeen);
  EXPECT_FALSE(r.fallback);
  expect_near_rel(r.out, direct_softmax(x, v, 3), 1e-14, "vs softmax");
  expect_near_rel(r.out, test::exact_softmax_row(x, v, 3, 2).out, 1e-14, "vs the synchronized softmax");
  EXPECT_NEAR(r.lse, std::log(std::exp(4) + std::exp(5) + std::exp(6) + std::exp(7)), 1e-13);
}

TEST(UnifiedMaxModel, PaperOverflowRowFallsBackToTheExactResult) {
  const std::vector<double> y = {3, 6, 9, 6};   // y3 - phi = 3 = b
  const std::vector<double> v = values(4, 3, 2);
  const SoftmaxRow r = test::unified_max_row(y, v, 3, kPhi, kA, kB, 2);
  EXPECT_TRUE(r.flags & kUmOverflow);
  EXPECT_TRUE(r.fallback);
  EXPECT_EQ(r.out, test::exact_softmax_row(y, v, 3, 2).out);   // bit for bit: the same computation
  expect_near_rel(r.out, direct_softmax(y, v, 3), 1e-14, "vs softmax");
  // The boundary convention: y1 - phi = -3 = a alone does not trigger (the row's maximum decides the
  // underflow side): the first partial [3, 6] on its own is a clean row.
  EXPECT_EQ(test::unified_max_flags({3, 6}, kPhi, kA, kB), kUmSeen);
}

TEST(UnifiedMaxModel, LowerSideTriggersOnTheRowMaximum) {
  // Every score at a - 1 below phi: the unified-max sums would be e^-4 small; the row falls back and
  // gets the exact softmax (here the mean of v), not 0/0 or a degraded value.
  const std::vector<double> x(5, kPhi + kA - 1);
  const std::vector<double> v = values(5, 2, 3);
  const SoftmaxRow r = test::unified_max_row(x, v, 2, kPhi, kA, kB, 3);
  EXPECT_EQ(r.flags, 0);
  EXPECT_TRUE(r.fallback);
  std::vector<double> mean(2, 0.0);
  for (int i = 0; i < 5; ++i)
    for (int c = 0; c < 2; ++c) mean[static_cast<size_t>(c)] += v[static_cast<size_t>(i) * 2 + c] / 5;
  expect_near_rel(r.out, mean, 1e-14, "uniform row");
  // One healthy maximum keeps the row: small elements next to it are harmless.
  std::vector<double> x2 = x;
  x2[3] = kPhi;
  EXPECT_EQ(test::unified_max_flags(x2, kPhi, kA, kB), kUmSeen);
}

TEST(UnifiedMaxModel, ExactBoundaryValues) {
  const double b_edge = kPhi + kB, a_edge = kPhi + kA;   // 9 and 3: x - phi is exact in double
  // Overflow side: x - phi >= b triggers, one ulp below does not.
  EXPECT_EQ(test::unified_max_flags({b_edge}, kPhi, kA, kB), kUmOverflow | kUmSeen);
  EXPECT_EQ(test::unified_max_flags({std::nextafter(b_edge, -kInf)}, kPhi, kA, kB), kUmSeen);
  EXPECT_EQ(test::unified_max_flags({std::nextafter(b_edge, kInf)}, kPhi, kA, kB), kUmOverflow | kUmSeen);
  // Underflow side: the maximum must be > a; at a exactly the row falls back, one ulp above it does not.
  EXPECT_EQ(test::unified_max_flags({a_edge}, kPhi, kA, kB), 0);
  EXPECT_EQ(test::unified_max_flags({std::nextafter(a_edge, kInf)}, kPhi, kA, kB), kUmSeen);
  EXPECT_EQ(test::unified_max_flags({std::nextafter(a_edge, -kInf)}, kPhi, kA, kB), 0);
  EXPECT_TRUE(test::unified_max_row({a_edge, a_edge}, {1, 2}, 1, kPhi, kA, kB, 1).fallback);
  EXPECT_FALSE(test::unified_max_row({a_edge, std::nextafter(a_edge, kInf)}, {1, 2}, 1, kPhi, kA, kB, 1).fallback);
}

TEST(UnifiedMaxModel, MaskedEntriesNeverTrigger) {
  EXPECT_EQ(test::unified_max_flags({-kInf, 4, 5, -kInf}, kPhi, kA, kB), kUmSeen);
  EXPECT_EQ(test::unified_max_flags({-kInf, -kInf, kPhi}, kPhi, kA, kB), kUmSeen);
  const std::vector<double> x = {-kInf, 4, -kInf, 7, -kInf};
  const std::vector<double> v = values(5, 2, 4);
  const SoftmaxRow r = test::unified_max_row(x, v, 2, kPhi, kA, kB, 5);   // ranges of one key, some all masked
  EXPECT_FALSE(r.fallback);
  expect_near_rel(r.out, test::exact_softmax_row(x, v, 2, 1).out, 1e-14, "masked row");
  // A fully masked row sets no flag; it takes the exact path, which gives zeros and LSE -inf (the
  // float64 decode reference's policy).
  const SoftmaxRow none = test::unified_max_row({-kInf, -kInf}, {1, 2, 3, 4}, 2, kPhi, kA, kB, 2);
  EXPECT_EQ(none.flags, 0);
  EXPECT_TRUE(none.fallback);
  EXPECT_EQ(none.out, std::vector<double>(2, 0.0));
  EXPECT_EQ(none.lse, -kInf);
}

TEST(UnifiedMaxModel, SplitInvarianceAndLateOverflow) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> dist(0.0, 1.5);
  for (int n : {1, 127, 4097}) {
    std::vector<double> x(static_cast<size_t>(n));
    for (double& s : x) s = dist(rng);
    const std::vector<double> v = values(n, 4, 6 + n);
    double top = -kInf;
    for (double s : x) top = std::max(top, s);
    const double phi = top - 2;   // the row's maximum 2 above phi: inside (-9, 8)
    const SoftmaxRow one = test::unified_max_row(x, v, 4, phi, -9, 8, 1);
    ASSERT_FALSE(one.fallback) << n;
    expect_near_rel(one.out, test::exact_softmax_row(x, v, 4, 1).out, 1e-12, "unified vs exact");
    for (int splits : {2, 3, 7, 64}) {
      const SoftmaxRow r = test::unified_max_row(x, v, 4, phi, -9, 8, splits);
      EXPECT_EQ(r.flags, one.flags) << n << " keys, " << splits << " splits";
      expect_near_rel(r.out, one.out, 1e-12, "split invariance");
      EXPECT_NEAR(r.lse, one.lse, 1e-12);
    }
    // An outlier in the last key (the last range, after every other range is done) still flags the row.
    std::vector<double> late = x;
    late.back() = phi + 8;
    for (int splits : {1, 2, 7, 64}) {
      const SoftmaxRow r = test::unified_max_row(late, v, 4, phi, -9, 8, splits);
      EXPECT_TRUE(r.flags & kUmOverflow) << splits;
      EXPECT_EQ(r.out, test::exact_softmax_row(late, v, 4, splits).out);
    }
  }
}

// ---- calibration

UnifiedMaxCalibrationOptions options(ScoreSample sample, double coverage = 0.9999) {
  UnifiedMaxCalibrationOptions o;
  o.sample = sample;
  o.coverage = coverage;
  return o;
}

TEST(UnifiedMaxCalibration, SmallSamplesGiveTheExpectedPhi) {
  // Row maxima 0..10: [min, max] is the interval (too few samples to drop any), width 10 in a window
  // of 17: 3.5 to spare on each side, phi = 10 - (8 - 3.5) = 5.5 (the maxima centred in (phi - 9, phi + 8)).
  std::vector<double> m;
  for (int i = 0; i <= 10; ++i) m.push_back(i);
  const UnifiedMaxCalibration c = calibrate_unified_max(m, options(ScoreSample::row_maxima));
  EXPECT_TRUE(c.enabled) << c.reason;
  EXPECT_TRUE(c.params.enabled);
  EXPECT_EQ(c.samples, 11);
  EXPECT_DOUBLE_EQ(c.interval_lo, 0);
  EXPECT_DOUBLE_EQ(c.interval_hi, 10);
  EXPECT_DOUBLE_EQ(c.headroom, 3.5);
  EXPECT_FLOAT_EQ(c.params.phi, 5.5f);
  EXPECT_FLOAT_EQ(c.params.lo, -9.f);
  EXPECT_FLOAT_EQ(c.params.hi, 8.f);
  EXPECT_NEAR(c.params.phi + c.params.hi - c.max_hi, c.max_lo - (c.params.phi + c.params.lo), 1e-6);
  // The coverage interval drops floor(n (1 - coverage) / 2) samples from each end.
  std::vector<float> many;
  for (int i = 0; i < 1000; ++i) many.push_back(static_cast<float>(i) / 100);
  const UnifiedMaxCalibration c90 = calibrate_unified_max(many, options(ScoreSample::row_maxima, 0.9));
  EXPECT_FLOAT_EQ(static_cast<float>(c90.interval_lo), 0.5f);
  EXPECT_FLOAT_EQ(static_cast<float>(c90.interval_hi), 9.49f);
}

TEST(UnifiedMaxCalibration, NormalRowMaximaGiveTheirQuantiles) {
  // 10^6 maxima ~ N(5, 1): the 99.99% interval is 5 -+ 3.8906, phi centres it: 5 - (-9 + 8) / 2 = 5.5.
  std::mt19937_64 rng(7);
  std::normal_distribution<double> dist(5.0, 1.0);
  std::vector<double> m(1000000);
  for (double& x : m) x = dist(rng);
  const UnifiedMaxCalibration c = calibrate_unified_max(m, options(ScoreSample::row_maxima));
  EXPECT_TRUE(c.enabled) << c.reason;
  EXPECT_NEAR(c.interval_lo, 5 - 3.8906, 0.08);
  EXPECT_NEAR(c.interval_hi, 5 + 3.8906, 0.08);
  EXPECT_NEAR(c.params.phi, 5.5, 0.05);
  // The maxima then fall back at a rate near 1e-4 (the tails beyond the window; far fewer here, since
  // the window is wider than the interval), checked with the host rule itself.
  long long falls = 0;
  for (double x : m) falls += test::unified_max_flags({x}, c.params.phi, c.params.lo, c.params.hi) != kUmSeen;
  EXPECT_LE(falls, 100);
}

TEST(UnifiedMaxCalibration, LseSamplesWidenTheLowerEdgeByTheRowLength) {
  const std::vector<double> lse = {2, 3, 4};
  UnifiedMaxCalibrationOptions o = options(ScoreSample::row_lse);
  o.keys_per_row = 1024;   // max in [lse - ln 1024, lse]
  const UnifiedMaxCalibration c = calibrate_unified_max(lse, o);
  EXPECT_NEAR(c.max_lo, 2 - std::log(1024.0), 1e-12);
  EXPECT_DOUBLE_EQ(c.max_hi, 4);
  EXPECT_TRUE(c.enabled) << c.reason;   // width 8.93 of 17
  EXPECT_NEAR(c.params.phi, (c.max_lo + c.max_hi) / 2 + 0.5, 1e-6);
  // Each row's own key count: only the long row's bound reaches down.
  const int keys[] = {1, 1024, 1};
  o.row_keys = keys;
  const UnifiedMaxCalibration per_row = calibrate_unified_max(lse, o);
  EXPECT_NEAR(per_row.max_lo, 3 - std::log(1024.0), 1e-12);
  EXPECT_DOUBLE_EQ(per_row.max_hi, 4);
  const int no_keys[] = {1, 0, 1};
  o.row_keys = no_keys;
  EXPECT_THROW(calibrate_unified_max(lse, o), Error);
}

TEST(UnifiedMaxCalibration, WideRangesDisableIt) {
  // OPT-6.7B (FlashDecoding++ Fig. 5): scores over [-496.8, 363.5], width 860.3: disabled.
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> opt(-496.8, 363.5);
  std::vector<double> s(200000);
  for (double& x : s) x = opt(rng);
  s.push_back(-496.8);
  s.push_back(363.5);
  const UnifiedMaxCalibration c = calibrate_unified_max(s, options(ScoreSample::scores));
  EXPECT_FALSE(c.enabled);
  EXPECT_FALSE(c.params.enabled);
  EXPECT_GT(c.interval_hi - c.interval_lo, 850);
  EXPECT_NE(c.reason.find("exact softmax"), std::string::npos) << c.reason;
  // Llama2-7B's score interval [-16.8, 6.5] (width 23.3) is wider than the fp16 window of 17: as raw
  // scores it is refused (conservative), while row maxima inside [0, 6.5] fit.
  EXPECT_FALSE(calibrate_unified_max(std::vector<double>{-16.8, 0, 6.5}, options(ScoreSample::scores)).enabled);
  EXPECT_TRUE(calibrate_unified_max(std::vector<double>{0, 3, 6.5}, options(ScoreSample::row_maxima)).enabled);
  // And with bf16's window (-40, 40) the Llama2 scores fit.
  UnifiedMaxCalibrationOptions bf = options(ScoreSample::scores);
  bf.window = unified_max_window(Fmt::bf16);
  EXPECT_TRUE(calibrate_unified_max(std::vector<double>{-16.8, 0, 6.5}, bf).enabled);
}

TEST(UnifiedMaxCalibration, HeadroomThresholdIsInclusive) {
  UnifiedMaxCalibrationOptions o = options(ScoreSample::row_maxima);
  o.window = {-8, 8};
  o.min_headroom = 1;
  EXPECT_TRUE(calibrate_unified_max(std::vector<double>{0, 14}, o).enabled);    // 1 to spare on each side
  EXPECT_FALSE(calibrate_unified_max(std::vector<double>{0, 14.01}, o).enabled);
}

TEST(UnifiedMaxCalibration, RefusesBadInput) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto kind = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::failure;
  };
  const UnifiedMaxCalibrationOptions o;
  EXPECT_EQ(kind([&] { calibrate_unified_max(std::vector<double>{}, o); }), ErrorKind::bad_input);
  EXPECT_EQ(kind([&] { calibrate_unified_max(std::vector<double>{-kInf, -kInf}, o); }), ErrorKind::bad_input);
  EXPECT_EQ(kind([&] { calibrate_unified_max(std::vector<double>{1, nan}, o); }), ErrorKind::bad_input);
  EXPECT_EQ(kind([&] { calibrate_unified_max(std::vector<double>{1, kInf}, o); }), ErrorKind::bad_input);
  UnifiedMaxCalibrationOptions bad = o;
  bad.window = {3, 3};
  EXPECT_EQ(kind([&] { calibrate_unified_max(std::vector<double>{1}, bad); }), ErrorKind::bad_input);
  bad = o;
  bad.coverage = 0;
  EXPECT_EQ(kind([&] { calibrate_unified_max(std::vector<double>{1}, bad); }), ErrorKind::bad_input);
  bad = o;
  bad.keys_per_row = 0;
  EXPECT_EQ(kind([&] { calibrate_unified_max(std::vector<double>{1}, bad); }), ErrorKind::bad_input);
  // -inf samples (fully masked rows) are skipped, not refused.
  EXPECT_EQ(calibrate_unified_max(std::vector<double>{-kInf, 1, 2}, o).samples, 2);
}

TEST(UnifiedMaxCalibration, CalibratedRowsNeedNoFallbackAndMatchTheExactSoftmax) {
  // Rows of 1 .. 1394 keys whose maxima spread over ~12 nats: calibrated from their maxima, every row
  // stays unified and equals the exact softmax.
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> shift(-3, 3);
  std::normal_distribution<double> dist(0, 1);
  std::vector<std::vector<double>> rows;
  std::vector<double> maxima;
  for (int r = 0; r < 200; ++r) {
    std::vector<double> x(static_cast<size_t>(1 + r * 7));
    const double c = shift(rng);
    for (double& s : x) s = c + dist(rng);
    double top = -kInf;
    for (double s : x) top = std::max(top, s);
    maxima.push_back(top);
    rows.push_back(std::move(x));
  }
  const UnifiedMaxCalibration c = calibrate_unified_max(maxima);
  ASSERT_TRUE(c.enabled) << c.reason;
  for (const std::vector<double>& x : rows) {
    const int n = static_cast<int>(x.size());
    const std::vector<double> v = values(n, 3, 10 + n);
    const SoftmaxRow r = test::unified_max_row(x, v, 3, c.params.phi, c.params.lo, c.params.hi, 7);
    EXPECT_FALSE(r.fallback) << n;
    expect_near_rel(r.out, test::exact_softmax_row(x, v, 3, 7).out, 1e-12, "calibrated row");
  }
}

// ---- the runtime's checks

TEST(UnifiedMaxWindowTest, WindowsAndLimitsFollowThePType) {
  const Spec int8 = parse_spec("decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 softmax=unified_max");
  const Spec bf16 = parse_spec("decode qk=bf16 pv=bf16 out=bf16 d=128 softmax=unified_max");
  EXPECT_EQ(unified_max_p_type(int8), Fmt::fp16);
  EXPECT_EQ(unified_max_p_type(bf16), Fmt::bf16);
  EXPECT_EQ(unified_max_window(Fmt::fp16).lo, -9);
  EXPECT_EQ(unified_max_window(Fmt::fp16).hi, 8);
  EXPECT_NEAR(unified_max_limits(Fmt::fp16).hi, std::log(65504.0), 1e-12);
  EXPECT_NEAR(unified_max_limits(Fmt::fp16).lo, -14 * std::log(2.0), 1e-12);
  // The default window sits inside the limits, with the room for V scales above it.
  EXPECT_GT(unified_max_limits(Fmt::fp16).hi - unified_max_window(Fmt::fp16).hi, 3.0);
  EXPECT_LT(unified_max_limits(Fmt::fp16).lo, unified_max_window(Fmt::fp16).lo);

  auto refused = [](const Spec& s, UnifiedMax um) {
    try {
      check_unified_max(s, um);
    } catch (const Error& e) {
      return e.kind() == ErrorKind::bad_input && std::string(e.what()).find('\n') == std::string::npos;
    }
    return false;
  };
  EXPECT_FALSE(refused(int8, UnifiedMax{}));
  EXPECT_TRUE(refused(int8, UnifiedMax{0, 3, 3, true}));                        // lo >= hi
  EXPECT_TRUE(refused(int8, UnifiedMax{0, 4, 3, true}));
  EXPECT_TRUE(refused(int8, UnifiedMax{NAN, -9, 8, true}));                     // not finite
  EXPECT_TRUE(refused(int8, UnifiedMax{0, -9, INFINITY, true}));
  EXPECT_TRUE(refused(int8, UnifiedMax{0, -9, 11.2f, true}));                   // beyond fp16's 65504
  EXPECT_FALSE(refused(bf16, UnifiedMax{0, -9, 11.2f, true}));
  EXPECT_TRUE(refused(int8, UnifiedMax{0, -10, 8, true}));                      // below fp16's normals
  EXPECT_FALSE(refused(int8, UnifiedMax{NAN, NAN, NAN, false}));                // disabled: not used
}

TEST(UnifiedMaxWindowTest, DecodeRefusesABadWindowWithoutAGpu) {
  RuntimeOptions o;
  o.use_cache = false;
  Runtime rt(o);
  DecodeCall call;
  call.spec = parse_spec("decode qk=int4:per_token pv=int4:per_token out=bf16 d=128 gqa=4 softmax=unified_max");
  call.problem = parse_problem("b=1,hq=4,hkv=1,q=1,kv=64");
  call.unified_max = UnifiedMax{0, 5, -5, true};
  try {
    rt.decode(call, nullptr);
    ADD_FAILURE() << "decode() took the window (5, -5)";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input) << e.what();
    EXPECT_NE(std::string(e.what()).find("lo < hi"), std::string::npos) << e.what();
  }
}

TEST(UnifiedMaxWindowTest, FallbackRowsNeedAUnifiedMaxDecodeFirst) {
  RuntimeOptions o;
  o.use_cache = false;
  Runtime rt(o);
  try {
    rt.decode_fallback_rows(nullptr);
    ADD_FAILURE() << "decode_fallback_rows answered without a unified-max decode";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input) << e.what();
  }
}

TEST(UnifiedMaxWindowTest, CountsFallbackRows) {
  const std::vector<int> flags = {kUmSeen, 0, kUmOverflow, kUmOverflow | kUmSeen, kUmSeen};
  EXPECT_EQ(count_fallback_rows(flags.data(), flags.size()), 3);
  EXPECT_EQ(count_fallback_rows(flags.data(), 0), 0);
}

}  // namespace
}  // namespace qattn

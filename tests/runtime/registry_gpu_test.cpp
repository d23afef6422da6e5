// The request flow on a real GPU: tune once, then in-process hits, then a new process-like Runtime on
// the same SQLite file gets the same decision with zero compiles and zero tuning.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "cache/maintenance.hpp"
#include "cache/store.hpp"
#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/runtime.hpp"
#include "qattn/validate.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace {

class RegistryGpu : public test::GpuTestWithDir {};

TEST_F(RegistryGpu, TuneOnceThenServeFromMemoryThenFromSqliteWithoutCompiling) {
  const Spec spec = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=k");
  const Problem problem = parse_problem("b=1,hq=8,hkv=2,q=1024,kv=1024");
  RuntimeOptions o;
  o.cache_path = (dir_ / "qattn.db").string();
  o.timing.repeats = 5;
  std::string winner;
  {
    Runtime rt(o);
    const Kernel& k = rt.kernel(spec, problem);
    winner = k.name();
    const RuntimeCounters c = rt.counters();
    EXPECT_EQ(c.tunings, 1);
    EXPECT_GT(c.compiles, 1) << "every candidate is compiled";
    const Kernel& again = rt.kernel(spec, problem);
    EXPECT_EQ(&again, &k);
    EXPECT_EQ(rt.counters().memory_hits, 1);
    // Same bucket, different exact size: still an in-process hit.
    rt.kernel(spec, parse_problem("b=1,hq=8,hkv=2,q=1000,kv=1000"));
    EXPECT_EQ(rt.counters().memory_hits, 2);
    EXPECT_TRUE(rt.check(spec, problem, test::fresh_seed()).passed);
    const long long compiled = rt.counters().compiles;
    const std::vector<double> samples = rt.benchmark(spec, problem);
    ASSERT_FALSE(samples.empty());
    for (double us : samples) EXPECT_GT(us, 0);
    // benchmark() times the launched form (here the fused-Q / TMA twin), which tuning already compiled.
    EXPECT_EQ(rt.counters().compiles, compiled);
  }
  {
    Runtime rt(o);
    const Kernel& k = rt.kernel(spec, problem);
    EXPECT_EQ(k.name(), winner);
    const RuntimeCounters c = rt.counters();
    EXPECT_EQ(c.tunings, 0);
    EXPECT_EQ(c.tuned_db_hits, 1);
    EXPECT_EQ(c.compiles, 0) << "the winner's cubin comes from SQLite";
    EXPECT_GE(c.binary_db_hits, 1);
  }
  cache::Store store(o.cache_path);
  const auto rows = store.list_tuned();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].kernel_name, winner);
  EXPECT_NE(rows[0].candidates_json.find("\"won\""), std::string::npos);
}

// A shipped cache made on this GPU model under another driver: its winner is not trusted blindly but
// verified here, then used (no tuning, no compile: the cubin is shipped too) and stored under this
// driver in the user layer; the runtime says so.
TEST_F(RegistryGpu, WinnerFromAnotherDriverIsRevalidatedThenUsed) {
  const Spec spec = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 causal smooth=k");
  const Problem problem = parse_problem("b=1,hq=4,hkv=4,q=512,kv=512");
  RuntimeOptions o;
  o.cache_path = (dir_ / "made_here.db").string();
  o.timing.repeats = 3;
  std::string winner;
  {
    Runtime rt(o);
    winner = rt.kernel(spec, problem).name();
  }
  {
    // The shipped file: this cache (its cubins, helper kernels included, as a pretuned cache has them)
    // with the winner's row moved to an older driver.
    const std::string shipped = (dir_ / "shipped.db").string();
    std::filesystem::copy_file(o.cache_path, shipped);   // the runtime closed it: no WAL left behind
    cache::Store store(shipped);
    const auto rows = store.list_tuned();
    ASSERT_EQ(rows.size(), 1u);
    cache::TunedRecord old = rows[0];
    old.device.driver_version -= 10;
    store.put_tuned(old);
    cache::prune(shipped, old.device.driver_version, "");   // drops the row made under this driver
    ASSERT_EQ(store.list_tuned().size(), 1u);
    ASSERT_EQ(store.list_tuned()[0].device.driver_version, old.device.driver_version);
  }
  RuntimeOptions app;
  app.shipped_cache_path = (dir_ / "shipped.db").string();
  app.cache_path = (dir_ / "user.db").string();
  Runtime rt(app);
  EXPECT_EQ(rt.kernel(spec, problem).name(), winner);
  const RuntimeCounters c = rt.counters();
  EXPECT_EQ(c.tunings, 0);
  EXPECT_EQ(c.compiles, 0) << "the winner's cubin comes from the shipped layer";
  EXPECT_EQ(c.tuned_db_hits, 1);
  bool said = false;
  for (const std::string& w : rt.cache_warnings()) said = said || w.find("re-validated") != std::string::npos;
  EXPECT_TRUE(said) << "the runtime reports the re-validation";
  cache::Store user(app.cache_path);
  const auto rows = user.list_tuned();
  ASSERT_EQ(rows.size(), 1u) << "the re-validated winner is stored under this driver in the user layer";
  EXPECT_EQ(rows[0].kernel_name, winner);
}

// The tuner verifies and times each candidate in the form attention() launches (its fused-Q / TMA twin),
// and says so in the candidate's detail; a candidate whose form is itself has no such note.
TEST_F(RegistryGpu, TheTunerTimesTheKernelAttentionLaunches) {
  RuntimeOptions options;
  options.use_cache = false;
  Runtime runtime(options);
  const Spec spec = runtime.resolve(parse_spec("prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 smooth=k"));
  if (!validate(spec)) GTEST_SKIP() << validate(spec).reason;
  const TuningResult r = runtime.tune(spec, Problem{1, 8, 8, 1024, 1024});
  int twins = 0;
  for (const CandidateOutcome& c : r.candidates) {
    const Tiling launched = runtime.launch_form(spec, c.tiling);
    const std::string note = "launched as " + kernel_name(spec, launched);
    if (launched != c.tiling) {
      ++twins;
      EXPECT_EQ(c.detail.rfind(note, 0), 0u) << c.kernel_name << ": " << c.detail;
    } else {
      EXPECT_EQ(c.detail.find("launched as"), std::string::npos) << c.kernel_name << ": " << c.detail;
    }
  }
  std::printf("[ tuner ] %d of %zu candidates ran as their launch form; winner %s\n", twins, r.candidates.size(),
              r.winner_name.c_str());
  EXPECT_GT(twins, 0) << "no candidate of this spec has a fused-Q or TMA twin here";
}

TEST_F(RegistryGpu, SpecForAnotherArchIsRefusedWithTheReason) {
  RuntimeOptions options;
  options.use_cache = false;
  Runtime rt(options);
  try {
    rt.kernel(parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=128 arch=sm_80"), Problem{});
    FAIL() << "an sm_80 spec was accepted on this device";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input);
    EXPECT_NE(std::string(e.what()).find("leave arch unset"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qattn

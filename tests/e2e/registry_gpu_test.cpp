// The request flow on a real GPU: tune once, then in-process hits, then a new process-like Runtime on
// the same SQLite file gets the same decision with zero compiles and zero tuning.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "cache/store.hpp"
#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace {

class RegistryGpu : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    dir_ = std::filesystem::temp_directory_path() / ("qattn_registry_" + std::to_string(test::fresh_seed()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    test::GpuTest::TearDown();
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

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
    const std::vector<double> samples = rt.benchmark(spec, problem);
    ASSERT_FALSE(samples.empty());
    for (double us : samples) EXPECT_GT(us, 0);
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

TEST_F(RegistryGpu, SpecForAnotherArchIsRefusedWithTheReason) {
  Runtime rt(RuntimeOptions{"", false});
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

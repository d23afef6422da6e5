// The runtime on top of the cache layers, without a GPU (compile-only): a shipped cache serves cubins
// under an empty user cache and is never written, QATTN_SHIPPED_CACHE names it, and an unusable user
// file does not stop the runtime but shows up in cache_warnings().
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "cache/store.hpp"
#include "cache_test_support.hpp"
#include "qattn/runtime.hpp"
#include "generator/search_space.hpp"

namespace qattn {
namespace {

using cache::testing::TempDir;

const char* kSpec = "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 causal smooth=k arch=sm_89";

struct ShippedCache {
  TempDir dir;
  Spec spec = parse_spec(kSpec);
  Tiling tiling = default_tiling(spec, default_limits(spec.arch));
  std::string shipped = dir.file("app/shipped.db");
  ShippedCache() {
    RuntimeOptions o;
    o.cache_path = shipped;
    Runtime builder(o);
    EXPECT_FALSE(builder.compile(spec, tiling).from_cache);
  }
};

TEST(RuntimeLayers, ShippedCacheServesCubinsAndIsNeverWritten) {
  ShippedCache fixture;
  const std::string before = cache::testing::read_bytes(fixture.shipped);
  RuntimeOptions o;
  o.cache_path = fixture.dir.file("user/qattn.db");
  o.shipped_cache_path = fixture.shipped;
  Runtime rt(o);
  EXPECT_TRUE(rt.compile(fixture.spec, fixture.tiling).from_cache);
  EXPECT_EQ(rt.counters().compiles, 0);
  const auto others = candidate_tilings(fixture.spec, default_limits(fixture.spec.arch));
  ASSERT_GT(others.size(), 1u);
  EXPECT_FALSE(rt.compile(fixture.spec, others[1]).from_cache);   // compiled, stored in the user layer
  EXPECT_TRUE(rt.cache_warnings().empty());
  EXPECT_EQ(rt.cache_path(), o.cache_path);
  cache::Store user(o.cache_path, cache::StoreOptions{true, 1000});
  EXPECT_EQ(user.stats().binary_count, 1) << "only the new binary: a shipped hit is not copied";
  EXPECT_EQ(cache::testing::read_bytes(fixture.shipped), before);
}

TEST(RuntimeLayers, EnvironmentNamesTheShippedCache) {
  ShippedCache fixture;
  ::setenv("QATTN_SHIPPED_CACHE", fixture.shipped.c_str(), 1);
  RuntimeOptions o;
  o.cache_path = fixture.dir.file("user/qattn.db");
  Runtime rt(o);
  ::unsetenv("QATTN_SHIPPED_CACHE");
  EXPECT_TRUE(rt.compile(fixture.spec, fixture.tiling).from_cache);
}

TEST(RuntimeLayers, DamagedUserCacheIsSetAsideAndReported) {
  ShippedCache fixture;
  RuntimeOptions o;
  o.cache_path = fixture.dir.file("user.db");
  cache::testing::write_bytes(o.cache_path, std::string(5000, '#'));
  o.shipped_cache_path = fixture.shipped;
  Runtime rt(o);
  const std::vector<std::string> warnings = rt.cache_warnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("moved it to " + o.cache_path + ".corrupt-"), std::string::npos) << warnings[0];
  EXPECT_TRUE(rt.compile(fixture.spec, fixture.tiling).from_cache);
}

TEST(RuntimeLayers, MissingShippedCacheIsReportedNotFatal) {
  TempDir dir;
  RuntimeOptions o;
  o.cache_path = dir.file("user.db");
  o.shipped_cache_path = dir.file("not-there.db");
  Runtime rt(o);
  const std::vector<std::string> warnings = rt.cache_warnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("does not exist"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("going on without the shipped cache"), std::string::npos) << warnings[0];
}

}  // namespace
}  // namespace qattn

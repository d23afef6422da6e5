// The runtime on top of the cache layers, without a GPU (compile-only): a shipped cache serves cubins
// under an empty user cache and is never written, QATTN_SHIPPED_CACHE names it, and an unusable user
// file does not stop the runtime but shows up in cache_warnings().
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "cache/store.hpp"
#include "cache_test_support.hpp"
#include "qattn/error.hpp"
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
  const auto others = gen::candidate_tilings(fixture.spec, default_limits(fixture.spec.arch));
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
  {
    cache::Store user(o.cache_path);
    user.put_binary(cache::testing::sample_binary(1));
  }
  std::string bytes = cache::testing::read_bytes(o.cache_path);
  for (std::size_t i = 0; i < 16; ++i) bytes[i] = '#';   // a qattn cache whose header magic is damaged
  cache::testing::write_bytes(o.cache_path, bytes);
  o.shipped_cache_path = fixture.shipped;
  Runtime rt(o);
  const std::vector<std::string> warnings = rt.cache_warnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("moved it to " + o.cache_path + ".corrupt-"), std::string::npos) << warnings[0];
  EXPECT_EQ(rt.cache_status(), warnings[0]);
  EXPECT_TRUE(rt.compile(fixture.spec, fixture.tiling).from_cache);
}

// A file the caller named as the cache that is not one (issue 29: `--db notes.json` renamed the user's
// file): refused as bad input, the file left byte-identical and nothing created beside it.
TEST(RuntimeLayers, ANamedFileThatIsNotACacheIsRefusedAndLeftAlone) {
  TempDir dir;
  RuntimeOptions o;
  o.cache_path = dir.file("notes.json");
  cache::testing::write_bytes(o.cache_path, std::string(5000, '#'));
  try {
    Runtime rt(o);
    FAIL() << "a runtime opened over the user's file";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::bad_input) << error.what();
    EXPECT_NE(std::string(error.what()).find("not a qattn cache"), std::string::npos) << error.what();
  }
  EXPECT_EQ(cache::testing::read_bytes(o.cache_path), std::string(5000, '#'));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 1);
  o.cache_path = "/dev/full";
  EXPECT_THROW(Runtime{o}, Error) << "a device is no cache";
}

TEST(RuntimeLayers, CacheStatusIsEmptyWhileTheCacheWorks) {
  TempDir dir;
  RuntimeOptions o;
  o.cache_path = dir.file("user.db");
  Runtime rt(o);
  EXPECT_EQ(rt.cache_status(), "");
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

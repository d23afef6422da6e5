// The one environment reader (env/env.hpp): paths are read at each call, so a tool or test that sets one
// between calls is seen; a set-but-empty path counts as unset.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <string>

#include "env/env.hpp"

namespace {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = ::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(Env, PathsAreReadAtEachCall) {
  {
    ScopedEnv dir("QATTN_CACHE_DIR", "/data/one");
    EXPECT_EQ(qattn::env::cache_dir(), "/data/one");
  }
  {
    ScopedEnv dir("QATTN_CACHE_DIR", "/data/two");
    EXPECT_EQ(qattn::env::cache_dir(), "/data/two");
  }
  ScopedEnv shipped("QATTN_SHIPPED_CACHE", "/opt/app/qattn.db");
  EXPECT_EQ(qattn::env::shipped_cache(), "/opt/app/qattn.db");
  ScopedEnv driver("QATTN_LIBCUDA", "/usr/lib/other/libcuda.so.1");
  EXPECT_EQ(qattn::env::libcuda(), "/usr/lib/other/libcuda.so.1");
}

TEST(Env, UnsetAndEmptyPathsAreEmpty) {
  for (const char* value : {static_cast<const char*>(nullptr), ""}) {
    ScopedEnv dir("QATTN_CACHE_DIR", value), shipped("QATTN_SHIPPED_CACHE", value), driver("QATTN_LIBCUDA", value);
    EXPECT_EQ(qattn::env::cache_dir(), "");
    EXPECT_EQ(qattn::env::shipped_cache(), "");
    EXPECT_EQ(qattn::env::libcuda(), "");
  }
}

// Switches and knobs are read once per process: each case runs in a fresh process (the "threadsafe"
// death-test style re-executes this binary), with the variables set before the first read.
TEST(Env, SwitchesAndKnobsAsSet) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto as_set = [] {
    ::setenv("QATTN_LOG", "1", 1);
    ::setenv("QATTN_SYNC_LAUNCH", "1", 1);
    ::setenv("QATTN_FUSE_Q", "0", 1);
    ::setenv("QATTN_TMA", "0", 1);
    ::setenv("QATTN_CONCURRENT_PASSES", "0", 1);
    ::setenv("QATTN_CAUSAL_BAND", "3", 1);
    ::setenv("QATTN_QUANT_ONE_PASS", "1", 1);
    namespace e = qattn::env;
    const bool ok = e::log() && e::sync_launch() && e::fuse_q_off() && e::tma_off() && e::concurrent_passes_off() &&
                    e::causal_band_heads() == 3 && e::quant_one_pass();
    std::exit(ok ? 0 : 1);
  };
  EXPECT_EXIT(as_set(), ::testing::ExitedWithCode(0), "");
}

TEST(Env, SwitchesAndKnobsDefaultOffWhenUnsetOrOtherValues) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto other_values = [] {
    ::setenv("QATTN_LOG", "yes", 1);               // only "1" turns logging on
    ::setenv("QATTN_SYNC_LAUNCH", "0", 1);         // "0" is off
    ::setenv("QATTN_FUSE_Q", "1", 1);              // only "0" turns a form off
    ::unsetenv("QATTN_TMA");
    ::setenv("QATTN_CONCURRENT_PASSES", "", 1);
    ::setenv("QATTN_CAUSAL_BAND", "-2", 1);        // not a band width: the automatic one
    ::setenv("QATTN_QUANT_ONE_PASS", "0", 1);
    namespace e = qattn::env;
    const bool ok = !e::log() && !e::sync_launch() && !e::fuse_q_off() && !e::tma_off() &&
                    !e::concurrent_passes_off() && e::causal_band_heads() == 0 && !e::quant_one_pass();
    std::exit(ok ? 0 : 1);
  };
  EXPECT_EXIT(other_values(), ::testing::ExitedWithCode(0), "");
}

}  // namespace

// default_cache_path: QATTN_CACHE_DIR, then XDG_CACHE_HOME, then ~/.cache.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "cache/store.hpp"

namespace qattn::cache {
namespace {

// Sets (or unsets, for nullopt) an environment variable for the scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(DefaultCachePath, EnvironmentPrecedence) {
  ScopedEnv home("HOME", "/home/tester");
  {
    ScopedEnv qattn("QATTN_CACHE_DIR", "/data/qattn-cache");
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg/cache");
    EXPECT_EQ(default_cache_path(), "/data/qattn-cache/qattn.db");
  }
  {
    ScopedEnv qattn("QATTN_CACHE_DIR", std::nullopt);
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg/cache");
    EXPECT_EQ(default_cache_path(), "/xdg/cache/qattn/qattn.db");
  }
  {
    ScopedEnv qattn("QATTN_CACHE_DIR", "");   // empty counts as unset
    ScopedEnv xdg("XDG_CACHE_HOME", std::nullopt);
    EXPECT_EQ(default_cache_path(), "/home/tester/.cache/qattn/qattn.db");
  }
  {
    ScopedEnv qattn("QATTN_CACHE_DIR", std::nullopt);
    ScopedEnv xdg("XDG_CACHE_HOME", "relative/cache");   // ignored, as the XDG spec says
    EXPECT_EQ(default_cache_path(), "/home/tester/.cache/qattn/qattn.db");
  }
}

}  // namespace
}  // namespace qattn::cache

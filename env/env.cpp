#include "env/env.hpp"

#include <cstdlib>
#include <cstring>

namespace qattn::env {
namespace {

std::string text(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : std::string();
}

bool equals(const char* name, const char* expected) {
  const char* value = std::getenv(name);
  return value && std::strcmp(value, expected) == 0;
}

}  // namespace

std::string cache_dir() { return text("QATTN_CACHE_DIR"); }
std::string xdg_cache_home() { return text("XDG_CACHE_HOME"); }
std::string home() { return text("HOME"); }
std::string shipped_cache() { return text("QATTN_SHIPPED_CACHE"); }
std::string libcuda() { return text("QATTN_LIBCUDA"); }

bool log() {
  static const bool on = equals("QATTN_LOG", "1");
  return on;
}

bool sync_launch() {
  static const bool on = [] {
    const std::string v = text("QATTN_SYNC_LAUNCH");
    return !v.empty() && v != "0";
  }();
  return on;
}

bool fuse_q_off() {
  static const bool off = equals("QATTN_FUSE_Q", "0");
  return off;
}

bool tma_off() {
  static const bool off = equals("QATTN_TMA", "0");
  return off;
}

bool concurrent_passes_off() {
  static const bool off = equals("QATTN_CONCURRENT_PASSES", "0");
  return off;
}

int causal_band_heads() {
  static const int heads = [] {
    const int n = std::atoi(text("QATTN_CAUSAL_BAND").c_str());
    return n > 0 ? n : 0;
  }();
  return heads;
}

bool plan_graphs_off() {
  static const bool off = equals("QATTN_PLAN_GRAPHS", "0");
  return off;
}

bool quant_one_pass() {
  static const bool on = equals("QATTN_QUANT_ONE_PASS", "1");
  return on;
}

}  // namespace qattn::env

#include "cache/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

namespace qattn::cache {

bool logging_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("QATTN_LOG");
    return value && std::strcmp(value, "1") == 0;
  }();
  return enabled;
}

void log_once(const std::string& line) {
  if (!logging_enabled()) return;
  static std::mutex mutex;
  static std::set<std::string> printed;
  std::lock_guard<std::mutex> lock(mutex);
  if (printed.insert(line).second) std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace qattn::cache

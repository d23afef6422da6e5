#include "cache/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "env/env.hpp"

namespace qattn::cache {

bool logging_enabled() {
  return env::log();
}

void log_once(const std::string& line) {
  if (!logging_enabled()) return;
  static std::mutex mutex;
  static std::set<std::string> printed;
  std::lock_guard<std::mutex> lock(mutex);
  if (printed.insert(line).second) std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace qattn::cache

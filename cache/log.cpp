#include "cache/log.hpp"

#include <atomic>
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

namespace {

std::atomic<bool> g_trouble_on_stderr{false};

void print_once(const std::string& line) {
  static std::mutex mutex;
  static std::set<std::string> printed;
  std::lock_guard<std::mutex> lock(mutex);
  if (printed.insert(line).second) std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace

void log_once(const std::string& line) {
  if (logging_enabled()) print_once(line);
}

void report_trouble_on_stderr(bool on) { g_trouble_on_stderr = on; }

void report_trouble(const std::string& line) {
  if (logging_enabled() || g_trouble_on_stderr) print_once(line);
}

}  // namespace qattn::cache

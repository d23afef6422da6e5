// The cache's only direct output: with QATTN_LOG=1 in the environment, each distinct warning line is
// printed once per process on stderr. Without it the cache prints nothing; warnings are still kept
// (Store::warnings, LayeredStore::warnings, Runtime::cache_warnings) for callers to show as they like.
#pragma once
#include <string>

namespace qattn::cache {

bool logging_enabled();                  // QATTN_LOG=1, read once
void log_once(const std::string& line);  // prints "line\n" on stderr the first time, when enabled

}  // namespace qattn::cache

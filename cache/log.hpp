// The cache's only direct output: with QATTN_LOG=1 in the environment, each distinct warning line is
// printed once per process on stderr; cache trouble is also printed when the program asked for it
// (report_trouble_on_stderr: the CLI does). Otherwise the cache prints nothing; warnings are still kept
// (Store::warnings, LayeredStore::warnings/status, Runtime::cache_warnings/cache_status) for callers.
#pragma once
#include <string>

namespace qattn::cache {

bool logging_enabled();                  // QATTN_LOG=1, read once
void log_once(const std::string& line);  // prints "line\n" on stderr the first time, when enabled

// Cache trouble (a layer that cannot be opened, read or written) is printed once per distinct line when
// QATTN_LOG=1 or after report_trouble_on_stderr(true) (the qattn CLI turns it on: a command-line user
// must see why nothing was stored). A library caller reads it instead from Runtime::cache_status().
void report_trouble_on_stderr(bool on);
void report_trouble(const std::string& line);

}  // namespace qattn::cache

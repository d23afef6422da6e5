// qattn cache list|stats|clear: inspect or empty the SQLite kernel cache.
#include <cstdio>

#include "cache/store.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "qattn/error.hpp"

namespace qattn::cli {

int cache(int argc, char** argv) {
  const Args args(argc, argv, 2, {"db"}, {});
  if (args.positional().size() != 1) throw_bad_input("qattn cache needs one action; accepted: list, stats, clear");
  const std::string action = args.positional()[0];
  if (action != "list" && action != "stats" && action != "clear")
    throw_bad_input("unknown cache action '" + action + "'; accepted: list, stats, clear");
  cache::Store::Options o;
  o.read_only = action != "clear";
  const std::string path = args.get("db", cache::default_cache_path());
  cache::Store store(path, o);
  if (action == "clear") {
    const auto before = store.stats();
    store.clear();
    std::printf("cleared %s: %lld binaries and %lld tuned entries removed\n", path.c_str(), before.binary_count,
                before.tuned_count);
    return 0;
  }
  if (action == "stats") {
    const auto s = store.stats();
    std::printf("path          %s\nschema        %d (compatible %d)\njournal       %s\nbinaries      %lld (%lld bytes)\n"
                "tuned         %lld\nfile size     %lld bytes\n",
                s.path.c_str(), s.schema_version, s.compatible_version, s.journal_mode.c_str(), s.binary_count,
                s.binary_bytes, s.tuned_count, s.file_bytes);
    return 0;
  }
  const auto rows = store.list_tuned();
  std::printf("%-40s %-22s %-36s %10s  %s\n", "spec", "bucket", "device", "us", "winner");
  for (const auto& r : rows)
    std::printf("%-40s %-22s %-36s %10.1f  %s\n", r.spec.c_str(), r.bucket.c_str(), r.device.str().substr(0, 36).c_str(),
                r.time_us, r.kernel_name.c_str());
  std::printf("%zu tuned entries\n", rows.size());
  return 0;
}

}  // namespace qattn::cli

// qattn cache list|stats|clear|export|import|merge|verify|prune: inspect, move and maintain the SQLite
// kernel cache (formats and rules: cache/maintenance.hpp; README "Caches: layers, shipping, maintenance").
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "cache/maintenance.hpp"
#include "cache/store.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "qattn/error.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/jit/toolchain.hpp"

namespace qattn::cli {
namespace {

const char* kActions = "list, stats, clear, export, import, merge, verify, prune";

void print_merge_report(const cache::MergeReport& r) {
  for (const auto& line : r.conflicts) std::printf("conflict: %s\n", line.c_str());
  std::printf("added %lld binaries, %lld tuned, %lld decisions; replaced %lld tuned, %lld decisions; "
              "%lld unchanged; %zu conflicts\n",
              r.binaries_added, r.tuned_added, r.decisions_added, r.tuned_replaced, r.decisions_replaced, r.unchanged,
              r.conflicts.size());
}

int show(const std::string& action, const std::string& path) {
  cache::Store::Options o;
  o.read_only = action != "clear";
  cache::Store store(path, o);
  if (action == "clear") {
    const auto before = store.stats();
    store.clear();
    std::printf("cleared %s: %lld binaries, %lld tuned entries and %lld decisions removed\n", path.c_str(),
                before.binary_count, before.tuned_count, before.decision_count);
    return 0;
  }
  if (action == "stats") {
    const auto s = store.stats();
    std::printf("path          %s\nschema        %d (compatible %d)\njournal       %s\nbinaries      %lld (%lld bytes)\n"
                "tuned         %lld\ndecisions     %lld\nfile size     %lld bytes\n",
                s.path.c_str(), s.schema_version, s.compatible_version, s.journal_mode.c_str(), s.binary_count,
                s.binary_bytes, s.tuned_count, s.decision_count, s.file_bytes);
    return 0;
  }
  const auto rows = store.list_tuned();
  std::printf("%-40s %-22s %-36s %10s  %s\n", "spec", "bucket", "device", "us", "winner");
  for (const auto& r : rows)
    std::printf("%-40s %-22s %-36s %10.1f  %s\n", r.spec.c_str(), r.bucket.c_str(), r.device.str().substr(0, 36).c_str(),
                r.time_us, r.kernel_name.c_str());
  std::printf("%zu tuned entries\n", rows.size());
  const auto decisions = store.list_decisions();
  if (!decisions.empty()) {
    std::printf("\n%-18s %-40s %-36s  %s\n", "kind", "key", "device", "decision");
    for (const auto& d : decisions)
      std::printf("%-18s %-40s %-36s  %s\n", d.kind.c_str(), d.key.c_str(), d.device.str().substr(0, 36).c_str(),
                  d.json.substr(0, 80).c_str());
  }
  std::printf("%zu decisions\n", decisions.size());
  return 0;
}

// prune's defaults: this qattn's toolchain, and the driver when one is loaded (no GPU: --keep-driver).
int prune(const Args& args, const std::string& path) {
  const std::string toolchain = args.get("keep-toolchain", rt::toolchain_fingerprint());
  int driver = args.get_int("keep-driver", 0, 1, 1000000);
  if (!args.has("keep-driver")) {
    std::string why;
    if (!rt::driver_available(&why))
      throw_bad_input("prune needs --keep-driver N on a machine without a CUDA driver (" + why +
                      "); accepted: a driver version such as 13000");
    driver = rt::driver_version();
  }
  const cache::PruneReport r = cache::prune(path, driver, toolchain);
  std::printf("pruned %s (kept driver %d, toolchain %s): deleted %lld binaries, %lld tuned entries, %lld decisions\n",
              path.c_str(), driver, toolchain.c_str(), r.binaries, r.tuned, r.decisions);
  return 0;
}

}  // namespace

int cache(int argc, char** argv) {
  // "-o F" (merge's output) is the one short option; read it as --out.
  std::vector<char*> words(argv, argv + argc);
  static char out_flag[] = "--out";
  for (auto& w : words) {
    if (!std::strcmp(w, "-o")) w = out_flag;
  }
  const Args args(argc, words.data(), 2, {"db", "json", "out", "keep-driver", "keep-toolchain"}, {});
  const auto& words_left = args.positional();
  if (words_left.empty()) throw_bad_input(std::string("qattn cache needs an action; accepted: ") + kActions);
  const std::string action = words_left[0];
  const std::size_t operands = action == "merge" ? 3 : 1;
  if (words_left.size() != operands)
    throw_bad_input("qattn cache " + action + " takes " +
                    (action == "merge" ? std::string("two input files (merge a.db b.db -o c.db)")
                                       : std::string("no further words (use --db/--json)")));
  try {
    if (action == "list" || action == "stats" || action == "clear")
      return show(action, args.get("db", cache::default_cache_path()));
    if (action == "export") {
      const std::string db = args.require("db", "(the cache to export)");
      const std::string json = args.require("json", "(the JSON file to write)");
      const std::vector<std::string> skipped = cache::export_json(db, json);
      for (const auto& line : skipped) std::printf("skipped: %s\n", line.c_str());
      std::printf("exported %s to %s\n", db.c_str(), json.c_str());
      return skipped.empty() ? 0 : 1;
    }
    if (action == "import") {
      const std::string json = args.require("json", "(the export to read)");
      const std::string db = args.require("db", "(the cache to import into)");
      print_merge_report(cache::import_json(json, db));
      return 0;
    }
    if (action == "merge") {
      const std::string out = args.require("out", "(written as -o c.db)");
      print_merge_report(cache::merge_files(words_left[1], words_left[2], out));
      std::printf("wrote %s\n", out.c_str());
      return 0;
    }
    if (action == "verify") {
      const std::string db = args.require("db", "(the cache to verify)");
      const std::vector<std::string> problems = cache::verify_file(db);
      for (const auto& line : problems) std::printf("%s: %s\n", db.c_str(), line.c_str());
      if (problems.empty()) std::printf("%s: ok\n", db.c_str());
      return problems.empty() ? 0 : 1;
    }
    if (action == "prune") return prune(args, args.require("db", "(the cache to prune)"));
  } catch (const std::invalid_argument& e) {
    throw_bad_input(e.what());
  }
  throw_bad_input("unknown cache action '" + action + "'; accepted: " + kActions);
}

}  // namespace qattn::cli

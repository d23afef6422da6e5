// qattn cache list|stats|clear|export|import|merge|verify|prune: inspect, move and maintain the SQLite
// kernel cache (formats and rules: cache/maintenance.hpp; docs/design/cache.md).
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cache/json_depth.hpp"
#include "cache/maintenance.hpp"
#include "cache/store.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/verbs.hpp"
#include "qattn/error.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/jit/recompile_check.hpp"
#include "runtime/jit/toolchain.hpp"

namespace qattn::cli {
namespace {

nlohmann::json merge_report_json(const cache::MergeReport& r) {
  return {{"added", {{"binaries", r.binaries_added}, {"tuned", r.tuned_added}, {"decisions", r.decisions_added}}},
          {"replaced", {{"tuned", r.tuned_replaced}, {"decisions", r.decisions_replaced}}},
          {"unchanged", r.unchanged},
          {"conflicts", r.conflicts}};
}

void print_merge_report(const cache::MergeReport& r) {
  for (const auto& line : r.conflicts) std::printf("conflict: %s\n", line.c_str());
  std::printf("added %lld binaries, %lld tuned, %lld decisions; replaced %lld tuned, %lld decisions; "
              "%lld unchanged; %zu conflicts\n",
              r.binaries_added, r.tuned_added, r.decisions_added, r.tuned_replaced, r.decisions_replaced, r.unchanged,
              r.conflicts.size());
}

void print_json(const nlohmann::json& j) { std::printf("%s\n", j.dump(2).c_str()); }

// The maintenance functions report a file that is not what they need as invalid_argument: bad input.
template <int (*action)(const Args&)>
int invalid_argument_is_bad_input(const Args& args) {
  try {
    return action(args);
  } catch (const std::invalid_argument& e) {
    throw_bad_input(e.what());
  }
}

cache::Store open_store(const std::string& path, bool read_only) {
  cache::Store::Options o;
  o.read_only = read_only;
  return cache::Store(path, o);
}

int list(const Args& args) {
  const std::string path = args.get("db", cache::default_cache_path());
  cache::Store store = open_store(path, true);
  const auto rows = store.list_tuned();
  const auto decisions = store.list_decisions();
  if (args.has("json")) {
    nlohmann::json j = {{"db", path}, {"tuned", nlohmann::json::array()}, {"decisions", nlohmann::json::array()}};
    for (const auto& r : rows)
      j["tuned"].push_back({{"spec", r.spec}, {"bucket", r.bucket}, {"device", r.device.str()},
                            {"toolchain", r.toolchain}, {"time_us", r.time_us}, {"winner", r.kernel_name}});
    for (const auto& d : decisions) {
      // The decision is its owner's JSON; a row that does not parse is shown as the text it holds.
      nlohmann::json decision =
          cache::json_too_deep(d.json) ? nlohmann::json(nlohmann::json::value_t::discarded) : nlohmann::json::parse(d.json, nullptr, false);
      if (decision.is_discarded()) decision = d.json;
      j["decisions"].push_back({{"kind", d.kind}, {"key", d.key}, {"device", d.device.str()},
                                {"toolchain", d.toolchain}, {"decision", decision}});
    }
    print_json(j);
    return 0;
  }
  std::printf("%-40s %-22s %-36s %10s  %s\n", "spec", "bucket", "device", "us", "winner");
  for (const auto& r : rows)
    std::printf("%-40s %-22s %-36s %10.1f  %s\n", r.spec.c_str(), r.bucket.c_str(), r.device.str().substr(0, 36).c_str(),
                r.time_us, r.kernel_name.c_str());
  std::printf("%zu tuned entries\n", rows.size());
  if (!decisions.empty()) {
    std::printf("\n%-18s %-40s %-36s  %s\n", "kind", "key", "device", "decision");
    for (const auto& d : decisions)
      std::printf("%-18s %-40s %-36s  %s\n", d.kind.c_str(), d.key.c_str(), d.device.str().substr(0, 36).c_str(),
                  d.json.substr(0, 80).c_str());
  }
  std::printf("%zu decisions\n", decisions.size());
  return 0;
}

int stats(const Args& args) {
  const std::string path = args.get("db", cache::default_cache_path());
  const auto s = open_store(path, true).stats();
  if (args.has("json")) {
    print_json({{"path", s.path}, {"schema_version", s.schema_version}, {"compatible_version", s.compatible_version},
                {"journal_mode", s.journal_mode}, {"binaries", s.binary_count}, {"binary_bytes", s.binary_bytes},
                {"tuned", s.tuned_count}, {"decisions", s.decision_count}, {"file_bytes", s.file_bytes}});
    return 0;
  }
  std::printf("path          %s\nschema        %d (compatible %d)\njournal       %s\nbinaries      %lld (%lld bytes)\n"
              "tuned         %lld\ndecisions     %lld\nfile size     %lld bytes\n",
              s.path.c_str(), s.schema_version, s.compatible_version, s.journal_mode.c_str(), s.binary_count,
              s.binary_bytes, s.tuned_count, s.decision_count, s.file_bytes);
  return 0;
}

int clear(const Args& args) {
  const std::string path = args.get("db", cache::default_cache_path());
  cache::Store store = open_store(path, false);
  const auto before = store.stats();
  store.clear();
  if (args.has("json")) {
    print_json({{"db", path},
                {"removed", {{"binaries", before.binary_count}, {"tuned", before.tuned_count},
                             {"decisions", before.decision_count}}}});
    return 0;
  }
  std::printf("cleared %s: %lld binaries, %lld tuned entries and %lld decisions removed\n", path.c_str(),
              before.binary_count, before.tuned_count, before.decision_count);
  return 0;
}

int export_cmd(const Args& args) {
  const std::string db = args.require("db", "(the cache to export)");
  const std::string json = args.require("json", "(the JSON file to write)");
  const std::vector<std::string> skipped = cache::export_json(db, json);
  for (const auto& line : skipped) std::printf("skipped: %s\n", line.c_str());
  std::printf("exported %s to %s\n", db.c_str(), json.c_str());
  return skipped.empty() ? 0 : 1;
}

int import_cmd(const Args& args) {
  const std::string json = args.require("json", "(the export to read)");
  const std::string db = args.require("db", "(the cache to import into)");
  print_merge_report(cache::import_json(json, db));
  return 0;
}

int merge(const Args& args) {
  if (args.positional().size() != 2)
    throw_bad_input("two input files are needed: merge a.db b.db -o c.db (see qattn cache merge --help)");
  const std::string out = args.require("out", "(written as -o c.db)");
  const cache::MergeReport r = cache::merge_files(args.positional()[0], args.positional()[1], out);
  if (args.has("json")) {
    nlohmann::json j = merge_report_json(r);
    j["out"] = out;
    print_json(j);
    return 0;
  }
  print_merge_report(r);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

// --recompile: the digest check, then every binary rebuilt and compared (runtime/jit/recompile_check.hpp).
int verify(const Args& args) {
  const std::string db = args.require("db", "(the cache to verify)");
  const bool recompile = args.has("recompile");
  for (const char* name : {"jobs", "filter"})
    if (!recompile && args.has(name))
      throw_bad_input(std::string("--") + name + " applies to --recompile only (see qattn cache verify --help)");
  std::vector<std::string> problems = cache::verify_file(db);
  rt::RecompileReport r;
  if (recompile) {
    rt::RecompileOptions o;
    o.jobs = static_cast<unsigned>(
        args.get_int("jobs", static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), 1, 256));
    o.filter = args.get("filter", "");
    try {
      r = rt::recompile_check(db, o);
    } catch (const cache::CacheError& e) {
      // A file that cannot be read is already among the problems (verify_file opened it first).
      if (problems.empty()) problems.push_back(e.what());
      r.toolchain = rt::toolchain_fingerprint();
    }
  }
  const bool ok = problems.empty() && r.mismatched == 0;
  if (args.has("json")) {
    nlohmann::json j = {{"db", db}, {"ok", ok}, {"problems", problems}};
    if (recompile) {
      nlohmann::json entries = nlohmann::json::array();
      for (const auto& e : r.entries)
        entries.push_back({{"key", e.key}, {"kernel_name", e.kernel_name}, {"arch", e.arch}, {"toolchain", e.toolchain},
                           {"status", rt::to_string(e.status)}, {"detail", e.detail}});
      j["recompile"] = {{"toolchain", r.toolchain}, {"checked", r.checked}, {"matched", r.matched},
                        {"mismatched", r.mismatched}, {"not_checkable", r.not_checkable},
                        {"filtered_out", r.filtered_out}, {"binaries", entries}};
    }
    print_json(j);
    return ok ? 0 : 1;
  }
  for (const auto& line : problems) std::printf("%s: %s\n", db.c_str(), line.c_str());
  if (recompile) {
    for (const auto& e : r.entries)
      if (e.status != rt::RecompileEntry::Status::matched)
        std::printf("%s: %s %s (%s, key %s): %s\n", db.c_str(),
                    e.status == rt::RecompileEntry::Status::mismatched ? "MISMATCH" : "skipped", e.kernel_name.c_str(),
                    e.arch.c_str(), e.key.substr(0, 12).c_str(), e.detail.c_str());
    std::printf("%s: recompiled %lld binaries: %lld matched, %lld mismatched, %lld not checkable here", db.c_str(),
                r.checked, r.matched, r.mismatched, r.not_checkable);
    if (r.filtered_out) std::printf(" (%lld not matching --filter)", r.filtered_out);
    std::printf("\n");
  }
  if (ok) std::printf("%s: ok\n", db.c_str());
  return ok ? 0 : 1;
}

// prune's defaults: this qattn's toolchain, and the driver when one is loaded (no GPU: --keep-driver).
int prune(const Args& args) {
  const std::string path = args.require("db", "(the cache to prune)");
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
  if (args.has("json")) {
    print_json({{"db", path}, {"kept_driver", driver}, {"kept_toolchain", toolchain},
                {"deleted", {{"binaries", r.binaries}, {"tuned", r.tuned}, {"decisions", r.decisions}}}});
    return 0;
  }
  std::printf("pruned %s (kept driver %d, toolchain %s): deleted %lld binaries, %lld tuned entries, %lld decisions\n",
              path.c_str(), driver, toolchain.c_str(), r.binaries, r.tuned, r.decisions);
  return 0;
}

Option default_db_option() {
  return {"db", "FILE", "the cache (default: $QATTN_CACHE_DIR/qattn.db, else ~/.cache/qattn/qattn.db)"};
}
Option required_db_option(const std::string& what) { return {"db", "FILE", what + " (required)"}; }

}  // namespace

const Verb& cache_verb() {
  static const Verb verb{
      "cache",
      "inspect, move and maintain the kernel cache: list, stats, clear, export, import, merge, verify, prune",
      {"cache <action> [options]   (qattn cache <action> --help for each)"},
      "The kernel cache is one SQLite file holding compiled kernels, tuned winners and decode/format decisions "
      "(formats and rules: cache/maintenance.hpp). Each action has its own options. None needs a GPU, except "
      "that prune reads the driver version from it unless given --keep-driver.",
      {},
      {{"qattn cache stats", "what the default cache holds"},
       {"qattn cache export --db h100.db --json h100.json", "write a cache as a portable JSON file"},
       {"qattn cache merge a.db b.db -o both.db", "merge two caches into a new file"}},
      0,
      {},
      nullptr};   // the actions below run; `qattn cache` alone is an error naming them (main.cpp)
  return verb;
}

const std::vector<const Verb*>& cache_actions() {
  static const Verb list_verb{
      "cache list",
      "the tuned winners and the decisions in a cache",
      {"cache list [--db FILE] [--json]"},
      "One row per tuned winner (spec, size bucket, device, time, kernel) and one per stored decision (kind, key, "
      "device, the decision's JSON). Opens the cache read-only.",
      {default_db_option(), json_option("the rows (decisions as their stored JSON)")},
      {{"qattn cache list", "the default cache's winners and decisions"},
       {"qattn cache list --db h100.db --json", "the same for another file, as JSON"}},
      0, {}, invalid_argument_is_bad_input<list>};
  static const Verb stats_verb{
      "cache stats",
      "path, schema, journal mode, row counts and sizes of a cache",
      {"cache stats [--db FILE] [--json]"},
      "Counts of binaries (and their bytes), tuned winners and decisions, the schema version and the file size. "
      "Opens the cache read-only.",
      {default_db_option(), json_option("the counts")},
      {{"qattn cache stats", "the default cache's counts"}, {"qattn cache stats --db h100.db --json", "as JSON"}},
      0, {}, invalid_argument_is_bad_input<stats>};
  static const Verb clear_verb{
      "cache clear",
      "delete every row of a cache (the file stays)",
      {"cache clear [--db FILE] [--json]"},
      "Removes every binary, tuned winner and decision and prints how many of each were removed.",
      {default_db_option(), json_option("the counts removed")},
      {{"qattn cache clear --db /tmp/q.db", "empty a scratch cache"}},
      0, {}, invalid_argument_is_bad_input<clear>};
  static const Verb export_verb{
      "cache export",
      "write a cache as a portable JSON file",
      {"cache export --db FILE --json OUT"},
      "Writes every row of the cache (opened read-only) to the JSON file OUT, through a temporary file and a "
      "rename. Binaries that fail their integrity check are left out and named (exit 1). Here --json names the "
      "file written (the data itself is JSON); the console gets one status line.",
      {required_db_option("the cache to export"), {"json", "OUT", "the JSON file to write (required)"}},
      {{"qattn cache export --db h100.db --json h100.json", "export for shipping or for review"}},
      0, {}, invalid_argument_is_bad_input<export_cmd>};
  static const Verb import_verb{
      "cache import",
      "add the rows of a JSON export to a cache",
      {"cache import --json IN --db FILE"},
      "Validates the whole export first, then adds its rows to the cache (created when missing) in one "
      "transaction, with the rules of merge (the faster tuned winner and the newer decision are kept; "
      "disagreements are listed). Here --json names the file read; the "
      "console gets the merge summary as text.",
      {{"json", "IN", "the export to read (required)"}, required_db_option("the cache to import into")},
      {{"qattn cache import --json h100.json --db ~/.cache/qattn/qattn.db", "import a shipped export"}},
      0, {}, invalid_argument_is_bad_input<import_cmd>};
  static const Verb merge_verb{
      "cache merge",
      "merge two caches into a new file",
      {"cache merge A B -o OUT [--json]"},
      "Writes OUT with the rows of caches A and B; on the same key the faster tuned winner and the newer decision "
      "are kept (A's row on a tie) and disagreements are listed. A and B are only read.",
      {{"out", "OUT", "the merged cache to write (required)"}, json_option("the merge summary")},
      {{"qattn cache merge a.db b.db -o both.db", "merge two machines' caches"}},
      2, {{"-o", "out"}}, invalid_argument_is_bad_input<merge>};
  static const Verb verify_verb{
      "cache verify",
      "check a cache's integrity (digests), or with --recompile that each binary is what this qattn builds",
      {"cache verify --db FILE [--json]", "cache verify --db FILE --recompile [--jobs N] [--filter REGEX] [--json]"},
      "Checks the database's integrity and each stored binary against its digest, and prints one line per "
      "problem or \"ok\"; exit 1 when there is a problem. Digests catch accidental damage only: whoever can "
      "write the file can replace a binary and its digest together. --recompile also rebuilds every binary "
      "from its kernel name (spec and tiling, or the helper kernel) and arch with this qattn's NVRTC and "
      "templates and compares it byte for byte with the stored one: one line per mismatch (MISMATCH) and per "
      "row of another toolchain (skipped: not checkable here), then a summary; exit 1 when any binary "
      "mismatches. No GPU needed; about a second of one core per binary. Check a cache from a source you do "
      "not trust this way (or rebuild it) before loading it.",
      {required_db_option("the cache to verify"),
       {"recompile", "", "also rebuild every binary of this toolchain and compare it with the stored one"},
       {"jobs", "N", "with --recompile: compile threads, 1..256 (default: one per CPU core)"},
       {"filter", "REGEX", "with --recompile: only binaries whose kernel name matches (ECMAScript regex, searched)"},
       json_option("the verdict, the problems and (--recompile) each binary's outcome")},
      {{"qattn cache verify --db shipped.db", "check a cache before shipping it"},
       {"qattn cache verify --db shipped.db --recompile --jobs 16",
        "prove each binary of a downloaded cache is what this qattn builds"}},
      0, {}, invalid_argument_is_bad_input<verify>};
  static const Verb prune_verb{
      "cache prune",
      "delete the rows of other drivers and toolchains",
      {"cache prune --db FILE [--keep-driver N] [--keep-toolchain T] [--json]"},
      "Deletes binaries, tuned winners and decisions made under another CUDA driver or another toolchain (NVRTC, "
      "qattn version, templates) than the ones kept. Without --keep-driver the loaded driver's version is kept, "
      "so a machine without a GPU must give it.",
      {required_db_option("the cache to prune"),
       {"keep-driver", "N", "the driver version to keep, e.g. 13000 (default: the loaded driver's)"},
       {"keep-toolchain", "T", "the toolchain fingerprint to keep (default: this qattn's, see qattn version)"},
       json_option("the counts deleted")},
      {{"qattn cache prune --db ~/.cache/qattn/qattn.db", "drop rows a driver or qattn upgrade made stale"},
       {"qattn cache prune --db shipped.db --keep-driver 13000", "the same on a machine without a GPU"}},
      0, {}, invalid_argument_is_bad_input<prune>};
  static const std::vector<const Verb*> actions = {&list_verb,   &stats_verb,  &clear_verb,  &export_verb,
                                                   &import_verb, &merge_verb,  &verify_verb, &prune_verb};
  return actions;
}

}  // namespace qattn::cli

// qattn report: the stored decode decisions (dataflow crossings and split counts, from `qattn pretune`)
// as a table on stdout and, with --out, one SVG of the timing curves per family and device.
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "cache/store.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "qattn/error.hpp"
#include "qattn/inflection.hpp"

namespace qattn::cli {
namespace {

// A file name from free text: letters, digits, '.', '-' kept, runs of anything else become one '_'.
std::string file_safe(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    if (keep) out += c;
    else if (!out.empty() && out.back() != '_') out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "decision" : out;
}

// The decisions of one family measured on one device with one toolchain.
struct Group {
  std::string family, device_text, device_name, toolchain;
  std::optional<InflectionTable> dataflow;
  std::optional<SplitTable> splits;
};

}  // namespace

int report(int argc, char** argv) {
  const Args args(argc, argv, 2, {"db", "out", "kind"}, {});
  if (!args.positional().empty())
    throw_bad_input("qattn report takes no positional arguments; accepted: --db F, --out DIR, --kind KIND");
  const std::string kind = args.get("kind", "all");
  if (kind != "all" && kind != kDecodeDataflowKind && kind != kDecodeSplitsKind)
    throw_bad_input("unknown --kind '" + kind + "'; accepted: all, decode_dataflow, decode_splits");
  const std::string path = args.get("db", cache::default_cache_path());
  if (!std::filesystem::is_regular_file(path))
    throw_bad_input("no cache file at '" + path + "'; accepted: --db with an existing qattn cache (qattn pretune fills it)");
  cache::Store::Options options;
  options.read_only = true;
  cache::Store store(path, options);

  std::map<std::tuple<std::string, std::string, std::string>, Group> groups;   // ordered for a stable report
  int unreadable = 0;
  for (const std::string& k : {std::string(kDecodeDataflowKind), std::string(kDecodeSplitsKind)}) {
    if (kind != "all" && kind != k) continue;
    for (const cache::DecisionRecord& r : store.list_decisions(k)) {
      Group& g = groups[{r.key, r.device.str(), r.toolchain}];
      g.family = r.key;
      g.device_text = r.device.str();
      g.device_name = r.device.name;
      g.toolchain = r.toolchain;
      // One damaged row should not hide the others: it is named on stderr and the exit code says so.
      try {
        if (k == kDecodeDataflowKind) g.dataflow = parse_inflection_table(r.json);
        else g.splits = parse_split_table(r.json);
      } catch (const Error& e) {
        ++unreadable;
        std::fprintf(stderr, "qattn report: skipping %s '%s' (%s): %s\n", k.c_str(), r.key.c_str(), g.device_text.c_str(),
                     e.what());
      }
    }
  }
  if (groups.empty()) {
    std::printf("no decode decisions in %s (qattn pretune measures them)\n", path.c_str());
    return unreadable ? 1 : 0;
  }

  const std::string out_dir = args.get("out");
  if (!out_dir.empty()) std::filesystem::create_directories(out_dir);
  std::set<std::string> written;
  for (const auto& [id, g] : groups) {
    if (!g.dataflow && !g.splits) continue;
    std::printf("device %s, toolchain %s\n", g.device_text.c_str(), g.toolchain.c_str());
    std::fputs(report_text(g.dataflow ? &*g.dataflow : nullptr, g.splits ? &*g.splits : nullptr).c_str(), stdout);
    if (!out_dir.empty() && g.dataflow) {
      // Same family and device name under another driver or toolchain: numbered, never overwritten.
      const std::string stem = file_safe(g.family) + "." + file_safe(g.device_name);
      std::string file = (std::filesystem::path(out_dir) / (stem + ".svg")).string();
      for (int n = 2; written.count(file); ++n)
        file = (std::filesystem::path(out_dir) / (stem + "-" + std::to_string(n) + ".svg")).string();
      write_file_atomically(file, report_svg(*g.dataflow, g.device_text));
      written.insert(file);
      std::printf("  wrote %s\n", file.c_str());
    }
    std::printf("\n");
  }
  return unreadable ? 1 : 0;
}

}  // namespace qattn::cli

// qattn report: the stored decode and linear decisions (dataflow crossings and split counts, from
// `qattn pretune`) as a table on stdout and, with --out, one SVG of the timing curves per family and device.
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "cache/store.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/verbs.hpp"
#include "qattn/error.hpp"
#include "qattn/inflection.hpp"
#include "qattn/linear_inflection.hpp"

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
  std::optional<LinearTable> linear;
  nlohmann::json dataflow_json, splits_json, linear_json;   // the stored decisions as they are, for --json
  std::string svg;                             // the file written for it, if any
};

nlohmann::json group_json(const Group& g) {
  nlohmann::json j = {{"family", g.family}, {"device", g.device_text}, {"device_name", g.device_name},
                      {"toolchain", g.toolchain}, {"dataflow", g.dataflow_json}, {"splits", g.splits_json},
                      {"linear", g.linear_json}};
  j["svg"] = g.svg.empty() ? nlohmann::json(nullptr) : nlohmann::json(g.svg);
  return j;
}

int report(const Args& args) {
  const bool json = args.has("json");
  const std::string kind = args.get("kind", "all");
  if (kind != "all" && kind != kDecodeDataflowKind && kind != kDecodeSplitsKind && kind != kLinearDataflowKind)
    throw_bad_input("unknown --kind '" + kind + "'; accepted: all, decode_dataflow, decode_splits, linear_dataflow");
  const std::string path = args.get("db", cache::default_cache_path());
  if (!std::filesystem::is_regular_file(path))
    throw_bad_input("no cache file at '" + path + "'; accepted: --db with an existing qattn cache (qattn pretune fills it)");
  cache::Store::Options options;
  options.read_only = true;
  cache::Store store(path, options);

  std::map<std::tuple<std::string, std::string, std::string>, Group> groups;   // ordered for a stable report
  int unreadable = 0;
  for (const std::string& k : {std::string(kDecodeDataflowKind), std::string(kDecodeSplitsKind), std::string(kLinearDataflowKind)}) {
    if (kind != "all" && kind != k) continue;
    for (const cache::DecisionRecord& r : store.list_decisions(k)) {
      Group& g = groups[{r.key, r.device.str(), r.toolchain}];
      g.family = r.key;
      g.device_text = r.device.str();
      g.device_name = r.device.name;
      g.toolchain = r.toolchain;
      // One damaged row should not hide the others: it is named on stderr and the exit code says so.
      try {
        if (k == kDecodeDataflowKind) {
          g.dataflow = parse_inflection_table(r.json);
          g.dataflow_json = nlohmann::json::parse(r.json);
        } else if (k == kLinearDataflowKind) {
          g.linear = parse_linear_table(r.json);
          g.linear_json = nlohmann::json::parse(r.json);
        } else {
          g.splits = parse_split_table(r.json);
          g.splits_json = nlohmann::json::parse(r.json);
        }
      } catch (const std::exception& e) {
        ++unreadable;
        std::fprintf(stderr, "qattn report: skipping %s '%s' (%s): %s\n", k.c_str(), r.key.c_str(), g.device_text.c_str(),
                     e.what());
      }
    }
  }
  if (groups.empty() && !json) {
    std::printf("no decode or linear decisions in %s (qattn pretune measures them)\n", path.c_str());
    return unreadable ? 1 : 0;
  }

  const std::string out_dir = args.get("out");
  if (!out_dir.empty()) std::filesystem::create_directories(out_dir);
  std::set<std::string> written;
  nlohmann::json out = {{"db", path}, {"groups", nlohmann::json::array()}};
  for (auto& [id, g] : groups) {
    if (!g.dataflow && !g.splits && !g.linear) continue;
    if (!json) {
      std::printf("device %s, toolchain %s\n", g.device_text.c_str(), g.toolchain.c_str());
      if (g.linear) std::fputs(report_text(*g.linear).c_str(), stdout);
      else std::fputs(report_text(g.dataflow ? &*g.dataflow : nullptr, g.splits ? &*g.splits : nullptr).c_str(), stdout);
    }
    if (!out_dir.empty() && (g.dataflow || g.linear)) {
      // Same family and device name under another driver or toolchain: numbered, never overwritten.
      const std::string stem = file_safe(g.family) + "." + file_safe(g.device_name);
      std::string file = (std::filesystem::path(out_dir) / (stem + ".svg")).string();
      for (int n = 2; written.count(file); ++n)
        file = (std::filesystem::path(out_dir) / (stem + "-" + std::to_string(n) + ".svg")).string();
      write_file_atomically(file, g.linear ? report_svg(*g.linear, g.device_text) : report_svg(*g.dataflow, g.device_text));
      written.insert(file);
      g.svg = file;
      if (!json) std::printf("  wrote %s\n", file.c_str());
    }
    if (json) out["groups"].push_back(group_json(g));
    else std::printf("\n");
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return unreadable ? 1 : 0;
}

}  // namespace

const Verb& report_verb() {
  static const Verb verb{
      "report",
      "the stored decode and linear decisions (dataflow crossings, split counts) as a table and SVG curves",
      {"report [--db FILE] [--kind all|decode_dataflow|decode_splits|linear_dataflow] [--out DIR] [--json]"},
      "Reads the decode and linear-layer decisions `qattn pretune` measured and stored in the cache (read-only) and "
      "prints, per spec family and device, where each dataflow wins (a linear layer's M1 and M2: GEMV below M1, flat "
      "GEMM below M2, GEMM from M2) and how many splits each size uses. With --out, one SVG "
      "of the timing curves per family and device is written to DIR. A damaged row is named on stderr and the "
      "others are still reported (exit 1). No GPU needed.",
      {{"db", "FILE", "an existing qattn cache (default: $QATTN_CACHE_DIR/qattn.db, else ~/.cache/qattn/qattn.db)"},
       {"kind", "K", "which decisions: all (default), decode_dataflow, decode_splits or linear_dataflow"},
       {"out", "DIR", "also write the timing curves as SVG files into DIR (created if missing)"},
       json_option("the decisions as stored, per family and device")},
      {{"qattn report", "the decode decisions of the default cache"},
       {"qattn report --db h100.db --out curves/", "the same for another cache, with one SVG per family and device"},
       {"qattn report --kind decode_splits --json", "the split tables as JSON"}},
      0,
      {},
      report};
  return verb;
}

}  // namespace qattn::cli

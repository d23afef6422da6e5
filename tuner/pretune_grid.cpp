// Pretune grids: parsing and validating a grid document, the built-in default grid, and its expansion
// into work items (include/qattn/pretune.hpp describes the format).
#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cache/safe_file.hpp"
#include "cache/json_depth.hpp"
#include "qattn/error.hpp"
#include "qattn/linear_inflection.hpp"
#include "qattn/pretune.hpp"
#include "generator/search_space.hpp"
#include "qattn/tuner.hpp"
#include "qattn/validate.hpp"

namespace qattn {
namespace {

using nlohmann::json;

constexpr int kMaxLength = 1 << 22;          // tokens; buckets clamp far below this anyway
constexpr size_t kMaxProblemsPerEntry = 4096;   // a typo like q_len: [1..100000] should not run for days

// Every message names where in the document the problem is; one line, as all qattn errors.
struct Where {
  std::string source;
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw_bad_input(source + ": " + path + ": " + what);
  }
};

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 48 ? s.substr(0, 45) + "..." : s;
}

void reject_unknown_keys(const json& object, const std::set<std::string>& accepted, const std::string& path,
                         const Where& where) {
  for (auto it = object.begin(); it != object.end(); ++it)
    if (!accepted.count(it.key())) {
      std::string list;
      for (const std::string& k : accepted) list += (list.empty() ? "" : ", ") + k;
      where.fail(path, "unknown field '" + it.key() + "'; accepted: " + list);
    }
}

// One integer or a non-empty list of them, each in [lo, hi].
std::vector<int> int_list(const json& v, const std::string& path, int lo, int hi, const Where& where) {
  const std::string expected = "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                               "] or a non-empty list of them, got " + shown(v);
  std::vector<int> out;
  const json list = v.is_array() ? v : json::array({v});
  if (list.empty()) where.fail(path, expected);
  for (const json& x : list) {
    if (!x.is_number_integer()) where.fail(path, expected);
    const long long n = x.get<long long>();
    if (n < lo || n > hi) where.fail(path, expected);
    out.push_back(static_cast<int>(n));
  }
  return out;
}

Spec parse_grid_spec(const json& v, const std::string& path, const Where& where) {
  if (!v.is_string()) where.fail(path, "expected a spec text, got " + shown(v));
  Spec spec;
  try {
    spec = parse_spec(v.get<std::string>());
  } catch (const Error& e) {
    where.fail(path, e.what());
  }
  if (spec.arch != Arch::unset)
    where.fail(path, std::string("leave arch= out of a pretune grid (each device tunes for its own arch); got arch=") +
                         to_string(spec.arch));
  if (spec.phase == Phase::decode && (spec.flow != Dataflow::automatic || spec.split_k != 0))
    where.fail(path, "a decode entry's flow= and splitk= are what its sweep chooses; leave them out");
  if (spec.phase == Phase::linear && spec.flow != Dataflow::automatic)
    where.fail(path, "a linear entry's flow= is what its sweep chooses; leave it out");
  if (const Verdict ok = validate(spec); !ok) where.fail(path, ok.reason);
  return spec;
}

// The problem lists of an entry, before they meet a spec (heads_kv may depend on the spec's gqa).
struct ProblemLists {
  std::vector<int> batch{1}, heads_q{32}, heads_kv, q_len, kv_len;   // heads_kv / kv_len empty: derived
};

ProblemLists parse_problem_lists(const json& v, const std::string& path, Phase kind, const Where& where) {
  if (!v.is_object()) where.fail(path, "expected an object with q_len (and batch, heads_q, heads_kv, kv_len), got " + shown(v));
  reject_unknown_keys(v, {"batch", "heads_q", "heads_kv", "q_len", "kv_len"}, path, where);
  ProblemLists p;
  if (v.contains("batch")) p.batch = int_list(v["batch"], path + ".batch", 1, 65536, where);
  if (v.contains("heads_q")) p.heads_q = int_list(v["heads_q"], path + ".heads_q", 1, 1024, where);
  if (v.contains("heads_kv")) p.heads_kv = int_list(v["heads_kv"], path + ".heads_kv", 1, 1024, where);
  if (!v.contains("q_len")) where.fail(path + ".q_len", "missing; give the query lengths, e.g. [1024, 4096]");
  p.q_len = int_list(v["q_len"], path + ".q_len", 1, kMaxLength, where);
  const json kv = v.contains("kv_len") ? v["kv_len"] : json("same");
  if (kv.is_string()) {
    if (kv.get<std::string>() != "same")
      where.fail(path + ".kv_len", "expected \"same\" or a list of KV lengths, got " + shown(kv));
    if (kind == Phase::decode)
      where.fail(path + ".kv_len", "a decode entry needs the KV-cache lengths as a list, e.g. [4096, 65536]");
  } else {
    p.kv_len = int_list(kv, path + ".kv_len", 1, kMaxLength, where);
  }
  return p;
}

std::vector<Problem> problems_for(const Spec& spec, const ProblemLists& lists, const std::string& path,
                                  const Where& where) {
  std::vector<Problem> out;
  for (int b : lists.batch)
    for (int hq : lists.heads_q) {
      std::vector<int> kv_heads = lists.heads_kv;
      if (kv_heads.empty()) {
        if (hq % spec.gqa != 0)
          where.fail(path + ".heads_q", std::to_string(hq) + " is not a multiple of gqa=" + std::to_string(spec.gqa) +
                                            " of '" + to_string(spec) + "'; give heads_kv");
        kv_heads = {hq / spec.gqa};
      }
      for (int hkv : kv_heads)
        for (int q : lists.q_len) {
          const std::vector<int> kv_lens = lists.kv_len.empty() ? std::vector<int>{q} : lists.kv_len;
          for (int kv : kv_lens) {
            const Problem p{b, hq, hkv, q, kv};
            if (const Verdict ok = validate(spec, p); !ok)
              where.fail(path, "'" + to_string(spec) + "' with " + to_string(p) + ": " + ok.reason);
            out.push_back(p);
            if (out.size() > kMaxProblemsPerEntry)
              where.fail(path, "more than " + std::to_string(kMaxProblemsPerEntry) +
                                   " problems per spec; shorten the lists (every combination is tuned)");
          }
        }
    }
  return out;
}

GridEntry parse_entry(const json& v, const std::string& path, const Where& where) {
  if (!v.is_object()) where.fail(path, "expected an object with spec (or specs) and problems, got " + shown(v));
  reject_unknown_keys(v, {"description", "kind", "problems", "spec", "specs"}, path, where);
  GridEntry entry;
  std::vector<std::pair<json, std::string>> spec_texts;   // (value, path)
  if (v.contains("spec") == v.contains("specs"))
    where.fail(path, "give exactly one of spec (a spec text) and specs (a list of them)");
  if (v.contains("spec")) spec_texts.push_back({v["spec"], path + ".spec"});
  else {
    const json& list = v["specs"];
    if (!list.is_array() || list.empty()) where.fail(path + ".specs", "expected a non-empty list of spec texts, got " + shown(list));
    for (size_t i = 0; i < list.size(); ++i) spec_texts.push_back({list[i], path + ".specs[" + std::to_string(i) + "]"});
  }
  for (const auto& [text, spec_path] : spec_texts) entry.specs.push_back(parse_grid_spec(text, spec_path, where));
  entry.kind = entry.specs.front().phase;
  if (v.contains("kind")) {
    const json& k = v["kind"];
    if (k != "prefill" && k != "decode" && k != "linear")
      where.fail(path + ".kind", "expected \"prefill\", \"decode\" or \"linear\", got " + shown(k));
    entry.kind = k == "decode" ? Phase::decode : k == "linear" ? Phase::linear : Phase::prefill;
  }
  for (size_t i = 0; i < entry.specs.size(); ++i)
    if (entry.specs[i].phase != entry.kind)
      where.fail(spec_texts[i].second, std::string("is a ") + to_string(entry.specs[i].phase) + " spec in a " +
                                           to_string(entry.kind) + " entry; one kind per entry");
  if (entry.kind == Phase::linear) {   // one sweep per layer over token counts
    if (v.contains("problems")) {
      const json& p = v["problems"];
      if (!p.is_object()) where.fail(path + ".problems", "expected {\"m\": [...]} for a linear entry, got " + shown(p));
      reject_unknown_keys(p, {"m"}, path + ".problems", where);
      if (p.contains("m")) entry.rows = int_list(p["m"], path + ".problems.m", 1, kMaxLinearTunedRows, where);
    }
    entry.problems.assign(entry.specs.size(), std::vector<Problem>{});
    return entry;
  }
  if (!v.contains("problems")) where.fail(path + ".problems", "missing; give at least {\"q_len\": [...]}");
  const ProblemLists lists = parse_problem_lists(v["problems"], path + ".problems", entry.kind, where);
  for (const Spec& s : entry.specs) entry.problems.push_back(problems_for(s, lists, path + ".problems", where));
  return entry;
}

}  // namespace

PretuneGrid parse_pretune_grid(const std::string& text, const std::string& source) {
  const Where where{source};
  json doc;
  if (cache::json_too_deep(text)) throw_bad_input(cache::json_too_deep_message(source));
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {   // parse_error, and out_of_range for a number such as 1e400
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    throw_bad_input(source + ": not valid JSON (" + what + ")");
  }
  if (!doc.is_object()) where.fail("top level", "expected an object {\"version\": 1, \"entries\": [...]}, got " + shown(doc));
  reject_unknown_keys(doc, {"description", "entries", "version"}, "top level", where);
  if (!doc.contains("version")) where.fail("version", "missing; accepted: 1");
  if (doc["version"] != 1) where.fail("version", shown(doc["version"]) + " is not supported; accepted: 1");
  if (!doc.contains("entries") || !doc["entries"].is_array() || doc["entries"].empty())
    where.fail("entries", "expected a non-empty list of entries");
  PretuneGrid grid;
  const json& entries = doc["entries"];
  for (size_t i = 0; i < entries.size(); ++i)
    grid.entries.push_back(parse_entry(entries[i], "entries[" + std::to_string(i) + "]", where));
  return grid;
}

PretuneGrid load_pretune_grid(const std::string& name_or_path) {
  if (name_or_path == "default") return parse_pretune_grid(default_pretune_grid_json(), "default grid");
  std::string text;
  try {
    // A regular file of at most 256 MiB: a FIFO or /dev/zero would never end (cache/safe_file.hpp).
    text = cache::read_input_file(name_or_path, "--grid");
  } catch (const std::exception& e) {
    throw_bad_input(std::string(e.what()) + " (or the word default)");
  }
  return parse_pretune_grid(text, "grid " + name_or_path);
}

std::string default_pretune_grid_json() {
  json prefill = json::array(), decode = json::array();
  for (const Spec& s : gen::default_grid(Arch::unset)) {
    // Prefill: the common head dims only; d 96 and 256 (fewer models, and d 256 times ~2x longer) would
    // push the default past its 10-minute budget. A model that needs them lists them in its own grid.
    // per_warp / per_thread run the per_token kernel (their quantizer differs, the tiling trade-offs do
    // not): tuning them again would only spend the budget. So do qk=int4 (on the H100 it runs the int8
    // kernel over [-7, 7] codes; a model on sm_80 .. sm_89 that wants the packed form tuned lists it).
    const bool fragment_scales = s.qk.gran == Gran::per_warp || s.qk.gran == Gran::per_thread;
    // fp16 / fp8 P·V after int8 Q·K^T stay out too: the 10-minute budget has no room
    // for them (a grid that needs them lists them); so does Q smoothing (smooth=q, mma.sync form only).
    const bool float_pv = s.quantized() && s.pv.fmt != Fmt::int8;
    if (s.phase == Phase::prefill && (s.head_dim == 64 || s.head_dim == 128) && !fragment_scales && !float_pv &&
        s.qk.fmt != Fmt::int4 && !(s.smooth & kSmoothQ))
      prefill.push_back(to_string(s));
  }
  // Decode: the families the dataflow/split sweeps cover (row caches, not flashq), ~5 s each on an H100.
  // Every format and softmax mode at d 128 with GQA 4 (M = 4, 8, ..., 64); GQA 1 for three formats
  // (M from 1: where the GEMV path wins); d 64 and 256 for int4 per token.
  const char* kv_formats[][2] = {{"fp16", "fp16"}, {"bf16", "bf16"}, {"int8:per_token", "bf16"},
                                 {"int4:per_token", "bf16"}, {"int4:per_group", "bf16"}, {"fp8e4m3:per_head", "bf16"}};
  auto family = [](const std::string& fmt, const std::string& out, int d, int gqa, const std::string& softmax) {
    return "decode qk=" + fmt + " pv=" + fmt + " out=" + out + " d=" + std::to_string(d) + " gqa=" + std::to_string(gqa) +
           (softmax == "exact" ? std::string() : " softmax=" + softmax);
  };
  for (const auto& f : kv_formats)
    for (const char* softmax : {"exact", "sas", "unified_max"}) decode.push_back(family(f[0], f[1], 128, 4, softmax));
  for (int i : {1, 2, 3}) decode.push_back(family(kv_formats[i][0], kv_formats[i][1], 128, 1, "exact"));
  for (int d : {64, 256}) decode.push_back(family("int4:per_token", "bf16", d, 4, "exact"));
  // Linear layers: the Llama-3-8B shapes (QKV 4096 -> 6144, O 4096 -> 4096, gate / up 4096 -> 14336,
  // down 14336 -> 4096) with bf16, int8 and int4 weights, each swept over m = 1 .. 8192 (a few seconds each).
  json linear = json::array();
  for (const char* w : {"bf16", "int8:per_channel", "int4:per_group"})
    for (const auto& nk : {std::pair<int, int>{6144, 4096}, {4096, 4096}, {14336, 4096}, {4096, 14336}})
      linear.push_back("linear a=bf16 w=" + std::string(w) + " out=bf16 n=" + std::to_string(nk.first) +
                       " k=" + std::to_string(nk.second));
  // Prefill: 32 query heads (one sequence of a 7-8B model's layer), every power of two from 1k to 16k
  // tokens. Most of the time goes to timing the ~28 int8 candidates at 8k and 16k (docs/design/tuning.md).
  const json grid = {
      {"version", 1},
      {"description", "qattn's built-in pretune grid: the shipped prefill formats, the row-cache decode families and "
                      "the Llama-3-8B linear layers"},
      {"entries",
       {{{"kind", "prefill"},
         {"specs", prefill},
         {"problems", {{"batch", {1}}, {"heads_q", {32}}, {"q_len", {1024, 2048, 4096, 8192, 16384}}, {"kv_len", "same"}}}},
        {{"kind", "decode"},
         {"specs", decode},
         {"problems", {{"batch", {1, 8, 64}}, {"heads_q", {32}}, {"q_len", {1}}, {"kv_len", {1024, 4096, 16384, 65536}}}}},
        {{"kind", "linear"}, {"specs", linear}}}}};
  return grid.dump(2);
}

std::string PretuneItem::key() const { return to_string(spec) + "|" + bucket; }

std::vector<PretuneItem> expand_grid(const PretuneGrid& grid) {
  std::vector<PretuneItem> items;
  std::map<std::string, size_t> by_key;
  for (const GridEntry& e : grid.entries)
    for (size_t i = 0; i < e.specs.size(); ++i) {
      if (e.kind == Phase::linear) {   // one sweep per spec; a spec listed again adds its rows
        PretuneItem item;
        item.kind = Phase::linear;
        item.spec = e.specs[i];
        item.bucket = "sweep";
        const auto [at, fresh] = by_key.emplace(item.key(), items.size());
        PretuneItem& target = fresh ? item : items[at->second];
        for (int m : e.rows)
          if (std::find(target.rows.begin(), target.rows.end(), m) == target.rows.end()) target.rows.push_back(m);
        std::sort(target.rows.begin(), target.rows.end());
        if (fresh) items.push_back(std::move(item));
        continue;
      }
      for (const Problem& p : e.problems[i]) {
        PretuneItem item;
        item.kind = e.kind;
        item.spec = e.specs[i];
        item.bucket = e.kind == Phase::decode ? "sweep" : problem_bucket(p);
        const auto [at, fresh] = by_key.emplace(item.key(), items.size());
        if (e.kind == Phase::decode) {   // one sweep per spec over every problem bucket given for it
          PretuneItem& target = fresh ? item : items[at->second];
          const std::string bucket = problem_bucket(p);
          const bool seen = std::any_of(target.sweep.begin(), target.sweep.end(),
                                        [&](const Problem& s) { return problem_bucket(s) == bucket; });
          if (!seen) target.sweep.push_back(p);
          if (!fresh) continue;
          item.problem = item.sweep.front();
        } else {
          if (!fresh) continue;
          item.problem = bucket_representative(item.bucket, p);
          if (const Verdict ok = validate(item.spec, item.problem); !ok)
            throw_bad_input("grid: the representative " + to_string(item.problem) + " of bucket " + item.bucket +
                            " does not fit '" + to_string(item.spec) + "': " + ok.reason);
        }
        items.push_back(std::move(item));
      }
    }
  return items;
}

std::vector<PretuneItem> order_for_tuning(std::vector<PretuneItem> items) {
  auto work = [](const Problem& p) { return 1.0 * p.batch * p.heads_q * p.q_len * p.kv_len; };
  std::stable_sort(items.begin(), items.end(), [&](const PretuneItem& a, const PretuneItem& b) {
    if (a.kind != b.kind) return static_cast<int>(a.kind) < static_cast<int>(b.kind);   // prefill, decode, linear
    if (a.kind != Phase::prefill) return false;   // decode and linear: grid order
    if (work(a.problem) != work(b.problem)) return work(a.problem) > work(b.problem);
    const std::string pa = to_string(a.problem), pb = to_string(b.problem);
    if (pa != pb) return pa < pb;
    if (a.spec.head_dim != b.spec.head_dim) return a.spec.head_dim < b.spec.head_dim;
    return static_cast<int>(a.spec.out) < static_cast<int>(b.spec.out);
  });
  return items;
}

}  // namespace qattn

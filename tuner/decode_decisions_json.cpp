// JSON form of the decode decisions (shapes in include/qattn/inflection.hpp). Reading checks everything
// the dispatch relies on, so a hand-edited or truncated cache row fails with one line naming the field.
#include "qattn/inflection.hpp"
#include "tuner/decision_json.hpp"

namespace qattn {
namespace {

using namespace decision_json;
constexpr const char* kDataflowFormat = "qattn.decode_dataflow";
constexpr const char* kSplitsFormat = "qattn.decode_splits";
constexpr const char* kDecodeKeyRule = "decode spec text without flow= and splitk=";

}  // namespace

void to_json(json& j, const InflectionTable& t) {
  json paths = json::array();
  for (const DecodePath& p : t.paths) {
    json tilings = json::array();
    for (const Tiling& x : p.tilings) tilings.push_back(to_string(x));
    paths.push_back({{"name", p.name}, {"flow", to_string(p.flow)}, {"tilings", tilings}});
  }
  json buckets = json::array();
  for (const DataflowBucket& b : t.buckets) {
    json us = json::array();
    for (const auto& curve : b.us) {
      json c = json::array();
      for (double x : curve) c.push_back(time_json(x));
      us.push_back(c);
    }
    json chosen = json::array();
    for (int k : b.choice.chosen) chosen.push_back(t.paths.at(static_cast<size_t>(k)).name);
    buckets.push_back({{"kv", b.kv_len}, {"rows", b.rows}, {"us", us}, {"crossings", b.choice.crossings},
                       {"chosen", chosen}, {"cost", b.choice.cost}});
  }
  j = json{{"format", kDataflowFormat}, {"version", kFormatVersion}, {"family", t.family}, {"batch", t.batch},
           {"heads_kv", t.heads_kv}, {"paths", paths}, {"buckets", buckets}};
}

void from_json(const json& j, InflectionTable& out) {
  const Reader r(kDecodeDataflowKind);
  InflectionTable t;
  t.family = r.header(j, kDataflowFormat, decode_family_key, "decode", kDecodeKeyRule);
  t.batch = static_cast<int>(r.integer(r.member(j, "", "batch"), "batch", 1, 1 << 30));
  t.heads_kv = static_cast<int>(r.integer(r.member(j, "", "heads_kv"), "heads_kv", 1, 1 << 20));

  const json& paths = r.array(r.member(j, "", "paths"), "paths");
  if (paths.empty() || paths.size() > 16) r.fail("paths", "must hold 1..16 paths");
  for (size_t k = 0; k < paths.size(); ++k) {
    const std::string where = Reader::at("paths", k);
    DecodePath p;
    p.name = r.text(r.member(paths[k], where, "name"), Reader::at(where, "name"));
    if (p.name.empty()) r.fail(Reader::at(where, "name"), "must not be empty");
    for (const DecodePath& q : t.paths)
      if (q.name == p.name) r.fail(Reader::at(where, "name"), "'" + p.name + "' names two paths; accepted: unique names");
    p.flow = r.flow(r.member(paths[k], where, "flow"), Reader::at(where, "flow"), {Dataflow::mma, Dataflow::gemv});
    const json& tilings = r.array(r.member(paths[k], where, "tilings"), Reader::at(where, "tilings"));
    if (tilings.empty() || tilings.size() > 8) r.fail(Reader::at(where, "tilings"), "must hold 1..8 tilings");
    for (size_t i = 0; i < tilings.size(); ++i) {
      p.tilings.push_back(r.tiling(tilings[i], Reader::at(Reader::at(where, "tilings"), i)));
      if (i > 0 && p.tilings[i].block_m <= p.tilings[i - 1].block_m)
        r.fail(Reader::at(where, "tilings"), "must be in strictly ascending block_m");
    }
    t.paths.push_back(std::move(p));
  }

  const json& buckets = r.array(r.member(j, "", "buckets"), "buckets");
  if (buckets.empty()) r.fail("buckets", "must hold at least one KV bucket");
  for (size_t bi = 0; bi < buckets.size(); ++bi) {
    const std::string where = Reader::at("buckets", bi);
    DataflowBucket b;
    b.kv_len = static_cast<int>(r.power_of_two(r.member(buckets[bi], where, "kv"), Reader::at(where, "kv"), 1 << 30));
    if (!t.buckets.empty() && b.kv_len <= t.buckets.back().kv_len)
      r.fail(Reader::at(where, "kv"), "must be larger than the previous bucket's (ascending, unique)");
    const json& rows = r.array(r.member(buckets[bi], where, "rows"), Reader::at(where, "rows"));
    for (size_t i = 0; i < rows.size(); ++i) {
      b.rows.push_back(static_cast<int>(r.integer(rows[i], Reader::at(Reader::at(where, "rows"), i), 1, kMaxDecodeRows)));
      if (i > 0 && b.rows[i] <= b.rows[i - 1]) r.fail(Reader::at(where, "rows"), "must be strictly ascending");
    }
    const json& us = r.array(r.member(buckets[bi], where, "us"), Reader::at(where, "us"));
    if (us.size() != t.paths.size())
      r.fail(Reader::at(where, "us"), "has " + std::to_string(us.size()) + " curves; accepted: one per path (" +
                                          std::to_string(t.paths.size()) + ")");
    for (size_t k = 0; k < us.size(); ++k) {
      const std::string cw = Reader::at(Reader::at(where, "us"), k);
      const json& curve = r.array(us[k], cw);
      if (curve.size() != b.rows.size())
        r.fail(cw, "has " + std::to_string(curve.size()) + " times; accepted: one per row (" + std::to_string(b.rows.size()) + ")");
      b.us.emplace_back();
      for (size_t i = 0; i < curve.size(); ++i) b.us.back().push_back(r.time(curve[i], Reader::at(cw, i)));
    }
    const json& crossings = r.array(r.member(buckets[bi], where, "crossings"), Reader::at(where, "crossings"));
    if (crossings.size() + 1 != t.paths.size())
      r.fail(Reader::at(where, "crossings"), "has " + std::to_string(crossings.size()) + " entries; accepted: one fewer than the paths");
    for (size_t i = 0; i < crossings.size(); ++i) {
      b.choice.crossings.push_back(
          static_cast<int>(r.integer(crossings[i], Reader::at(Reader::at(where, "crossings"), i), 1, kNeverRows)));
      if (i > 0 && b.choice.crossings[i] < b.choice.crossings[i - 1])
        r.fail(Reader::at(where, "crossings"), "must be non-decreasing (M1 <= M2 <= ...)");
    }
    const json& chosen = r.array(r.member(buckets[bi], where, "chosen"), Reader::at(where, "chosen"));
    if (chosen.size() != b.rows.size()) r.fail(Reader::at(where, "chosen"), "must name one path per row");
    for (size_t i = 0; i < chosen.size(); ++i) {
      const std::string cw = Reader::at(Reader::at(where, "chosen"), i);
      const std::string name = r.text(chosen[i], cw);
      int k = 0;
      while (k < static_cast<int>(t.paths.size()) && t.paths[static_cast<size_t>(k)].name != name) ++k;
      if (k == static_cast<int>(t.paths.size())) r.fail(cw, "'" + name + "' is not one of the paths");
      // The crossings are the decision; `chosen` is their evaluation at the measured rows and must agree.
      int implied = 0;
      while (implied < static_cast<int>(b.choice.crossings.size()) && b.rows[i] >= b.choice.crossings[static_cast<size_t>(implied)])
        ++implied;
      if (k != implied)
        r.fail(cw, "is '" + name + "' but the crossings give '" + t.paths[static_cast<size_t>(implied)].name + "' at M " +
                       std::to_string(b.rows[i]));
      b.choice.chosen.push_back(k);
    }
    b.choice.cost = r.number(r.member(buckets[bi], where, "cost"), Reader::at(where, "cost"), 0, 1e300);
    t.buckets.push_back(std::move(b));
  }
  out = std::move(t);
}

void to_json(json& j, const SplitTable& t) {
  json cells = json::array();
  for (const SplitCell& c : t.cells) {
    json us = json::array();
    for (double x : c.us) us.push_back(time_json(x));
    cells.push_back({{"bh", c.batch_heads}, {"kv", c.kv_len}, {"flow", to_string(c.flow)}, {"tiling", to_string(c.tiling)},
                     {"splits", c.splits}, {"us", us}, {"chosen", c.chosen}});
  }
  j = json{{"format", kSplitsFormat}, {"version", kFormatVersion}, {"family", t.family},
           {"q_len", t.q_len}, {"tolerance", t.tolerance}, {"cells", cells}};
}

void from_json(const json& j, SplitTable& out) {
  const Reader r(kDecodeSplitsKind);
  SplitTable t;
  t.family = r.header(j, kSplitsFormat, decode_family_key, "decode", kDecodeKeyRule);
  t.q_len = static_cast<int>(r.integer(r.member(j, "", "q_len"), "q_len", 1, kMaxDecodeRows));
  t.tolerance = r.number(r.member(j, "", "tolerance"), "tolerance", 0, 0.999);
  const json& cells = r.array(r.member(j, "", "cells"), "cells");
  for (size_t ci = 0; ci < cells.size(); ++ci) {
    const std::string where = Reader::at("cells", ci);
    SplitCell c;
    c.batch_heads = r.power_of_two(r.member(cells[ci], where, "bh"), Reader::at(where, "bh"), 1LL << 40);
    c.kv_len = static_cast<int>(r.power_of_two(r.member(cells[ci], where, "kv"), Reader::at(where, "kv"), 1 << 30));
    if (!t.cells.empty()) {
      const SplitCell& prev = t.cells.back();
      if (c.batch_heads < prev.batch_heads || (c.batch_heads == prev.batch_heads && c.kv_len <= prev.kv_len))
        r.fail(where, "must come after the previous cell (ascending bh, then kv; unique)");
    }
    c.flow = r.flow(r.member(cells[ci], where, "flow"), Reader::at(where, "flow"), {Dataflow::mma, Dataflow::gemv});
    c.tiling = r.tiling(r.member(cells[ci], where, "tiling"), Reader::at(where, "tiling"));
    const json& splits = r.array(r.member(cells[ci], where, "splits"), Reader::at(where, "splits"));
    for (size_t i = 0; i < splits.size(); ++i) {
      c.splits.push_back(static_cast<int>(r.integer(splits[i], Reader::at(Reader::at(where, "splits"), i), 1, 1 << 20)));
      if (i > 0 && c.splits[i] <= c.splits[i - 1]) r.fail(Reader::at(where, "splits"), "must be strictly ascending");
    }
    const json& us = r.array(r.member(cells[ci], where, "us"), Reader::at(where, "us"));
    if (us.size() != c.splits.size()) r.fail(Reader::at(where, "us"), "must hold one time per split count");
    for (size_t i = 0; i < us.size(); ++i) c.us.push_back(r.time(us[i], Reader::at(Reader::at(where, "us"), i)));
    c.chosen = static_cast<int>(r.integer(r.member(cells[ci], where, "chosen"), Reader::at(where, "chosen"), 0, 1 << 20));
    bool listed = c.chosen == 0;
    for (int s : c.splits) listed = listed || s == c.chosen;
    if (!listed) r.fail(Reader::at(where, "chosen"), "is " + std::to_string(c.chosen) + "; accepted: 0 or one of the split counts");
    t.cells.push_back(std::move(c));
  }
  out = std::move(t);
}

std::string dump_decision(const InflectionTable& t) { return json(t).dump(); }
std::string dump_decision(const SplitTable& t) { return json(t).dump(); }
InflectionTable parse_inflection_table(std::string_view text) { return parse_text<InflectionTable>(text, kDecodeDataflowKind); }
SplitTable parse_split_table(std::string_view text) { return parse_text<SplitTable>(text, kDecodeSplitsKind); }

}  // namespace qattn

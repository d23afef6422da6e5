// JSON form of a linear layer's inflection table (shape in include/qattn/linear_inflection.hpp). Reading
// checks everything the dispatch relies on, so a hand-edited or truncated cache row fails with one line
// naming the field.
#include "qattn/linear_inflection.hpp"
#include "tuner/decision_json.hpp"

namespace qattn {
namespace {

using namespace decision_json;
constexpr const char* kFormat = "qattn.linear_dataflow";

// [path][point] arrays: one curve per dataflow, one entry per row.
template <class Read>
void read_curves(const Reader& r, const json& j, const char* key, size_t points, Read&& read) {
  const json& curves = r.array(r.member(j, "", key), key);
  if (curves.size() != std::size(kLinearPaths)) r.fail(key, "must hold one array per dataflow (gemv, flat, gemm)");
  for (size_t k = 0; k < curves.size(); ++k) {
    const std::string where = Reader::at(key, k);
    const json& curve = r.array(curves[k], where);
    if (curve.size() != points) r.fail(where, "must hold one entry per row");
    for (size_t i = 0; i < points; ++i) read(k, i, curve[i], Reader::at(where, i));
  }
}

}  // namespace

void to_json(json& j, const LinearTable& t) {
  json paths = json::array(), us = json::array(), tilings = json::array(), chosen = json::array();
  for (Dataflow f : kLinearPaths) paths.push_back(to_string(f));
  for (const auto& curve : t.us) {
    json c = json::array();
    for (double x : curve) c.push_back(time_json(x));
    us.push_back(c);
  }
  for (const auto& curve : t.tilings) {
    json c = json::array();
    for (const Tiling& x : curve) c.push_back(x.block_m == 0 ? json(nullptr) : json(to_string(x)));
    tilings.push_back(c);
  }
  for (int k : t.choice.chosen) chosen.push_back(to_string(kLinearPaths[static_cast<size_t>(k)]));
  j = json{{"format", kFormat},        {"version", kFormatVersion}, {"family", t.family},
           {"paths", paths},           {"rows", t.rows},            {"us", us},
           {"tilings", tilings},       {"splits", t.splits},        {"crossings", t.choice.crossings},
           {"chosen", chosen},         {"cost", t.choice.cost}};
}

void from_json(const json& j, LinearTable& out) {
  const Reader r(kLinearDataflowKind);
  LinearTable t;
  t.family = r.header(j, kFormat, linear_family_key, "linear", "linear spec text without flow=");
  const json& paths = r.array(r.member(j, "", "paths"), "paths");
  if (paths.size() != std::size(kLinearPaths)) r.fail("paths", "must be [\"gemv\", \"flat\", \"gemm\"]");
  for (size_t k = 0; k < paths.size(); ++k)
    if (r.flow(paths[k], Reader::at("paths", k), {kLinearPaths[k]}) != kLinearPaths[k]) r.fail("paths", "out of order");
  const json& rows = r.array(r.member(j, "", "rows"), "rows");
  if (rows.empty()) r.fail("rows", "must not be empty");
  for (size_t i = 0; i < rows.size(); ++i) {
    t.rows.push_back(static_cast<int>(r.integer(rows[i], Reader::at("rows", i), 1, kMaxLinearTunedRows)));
    if (i > 0 && t.rows[i] <= t.rows[i - 1]) r.fail("rows", "must be strictly ascending");
  }
  const size_t n = t.rows.size(), np = std::size(kLinearPaths);
  t.us.assign(np, std::vector<double>(n));
  t.tilings.assign(np, std::vector<Tiling>(n, Tiling{0, 0, 0, 0}));
  t.splits.assign(np, std::vector<int>(n));
  read_curves(r, j, "us", n, [&](size_t k, size_t i, const json& v, const std::string& at) { t.us[k][i] = r.time(v, at); });
  read_curves(r, j, "tilings", n, [&](size_t k, size_t i, const json& v, const std::string& at) {
    if (!v.is_null()) t.tilings[k][i] = r.tiling(v, at);
  });
  read_curves(r, j, "splits", n, [&](size_t k, size_t i, const json& v, const std::string& at) {
    t.splits[k][i] = static_cast<int>(r.integer(v, at, 0, 1 << 20));
  });
  const json& crossings = r.array(r.member(j, "", "crossings"), "crossings");
  if (crossings.size() != np - 1) r.fail("crossings", "must hold M1 and M2");
  for (size_t i = 0; i < crossings.size(); ++i) {
    t.choice.crossings.push_back(static_cast<int>(r.integer(crossings[i], Reader::at("crossings", i), 1, kMaxLinearTunedRows + 1)));
    if (i > 0 && t.choice.crossings[i] < t.choice.crossings[i - 1]) r.fail("crossings", "must be M1 <= M2");
  }
  const json& chosen = r.array(r.member(j, "", "chosen"), "chosen");
  if (chosen.size() != n) r.fail("chosen", "must hold one dataflow per row");
  for (size_t i = 0; i < n; ++i) {
    const Dataflow f = r.flow(chosen[i], Reader::at("chosen", i), {Dataflow::gemv, Dataflow::flat, Dataflow::gemm});
    t.choice.chosen.push_back(f == Dataflow::gemv ? 0 : f == Dataflow::flat ? 1 : 2);
  }
  t.choice.cost = r.number(r.member(j, "", "cost"), "cost", 0, 1e300);
  out = std::move(t);
}

std::string dump_decision(const LinearTable& t) { return json(t).dump(); }
LinearTable parse_linear_table(std::string_view text) { return parse_text<LinearTable>(text, kLinearDataflowKind); }

}  // namespace qattn

// The linear-layer sweep (include/qattn/linear_inflection.hpp): every dataflow timed over m through
// LinearTimer at its best split count, the crossings M1 <= M2 chosen by find_crossings, and the O(1)
// dispatch built from them. A failed point is recorded as NaN, never fatal.
#include <algorithm>
#include <cmath>
#include <set>

#include "generator/search_space.hpp"
#include "qattn/error.hpp"
#include "qattn/linear.hpp"
#include "qattn/linear_inflection.hpp"

namespace qattn {
namespace {

double time_point(LinearTimer& timer, const Spec& spec, const Tiling& tiling, int m, int splits) {
  try {
    const double us = timer.time_us(spec, tiling, m, splits);
    return std::isfinite(us) && us > 0 ? us : NAN;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::no_gpu) throw;   // every later point would fail the same way
    return NAN;
  } catch (const std::exception&) {
    return NAN;
  }
}

int max_rows(Dataflow flow, const LinearSweepOptions& o) {
  return flow == Dataflow::gemv ? o.gemv_max_rows : flow == Dataflow::flat ? o.flat_max_rows : kMaxLinearTunedRows;
}

}  // namespace

std::string linear_family_key(const Spec& spec) {
  if (spec.phase != Phase::linear) throw_bad_input("a linear decision key needs a linear spec, not '" + to_string(spec) + "'");
  Spec s = spec;
  s.flow = Dataflow::automatic;
  return to_string(s);
}

LinearTable sweep_linear(const Spec& family_in, const LinearSweepOptions& o, LinearTimer& timer) {
  Spec family = family_in;
  family.flow = Dataflow::automatic;
  linear_family_key(family);
  require(validate(family));
  if (family.arch == Arch::unset) throw_bad_input("the linear sweep needs a concrete arch (the runtime sets the device's)");
  std::set<int> rows_set;
  for (int m : o.rows)
    if (m >= 1 && m <= kMaxLinearTunedRows) rows_set.insert(m);
  if (rows_set.empty())
    throw_bad_input("the linear sweep needs token counts in 1.." + std::to_string(kMaxLinearTunedRows));
  const DeviceLimits limits = o.limits.max_smem_per_block > 0 ? o.limits : default_limits(family.arch);

  LinearTable t;
  t.family = linear_family_key(family);
  t.rows.assign(rows_set.begin(), rows_set.end());
  const size_t paths = std::size(kLinearPaths);
  t.us.assign(paths, std::vector<double>(t.rows.size(), NAN));
  t.tilings.assign(paths, std::vector<Tiling>(t.rows.size(), Tiling{0, 0, 0, 0}));
  t.splits.assign(paths, std::vector<int>(t.rows.size(), 0));
  int total = 0;
  for (Dataflow flow : kLinearPaths)
    for (int m : t.rows) total += m <= max_rows(flow, o) ? 1 : 0;
  int done = 0;
  for (size_t k = 0; k < paths; ++k) {
    Spec spec = family;
    spec.flow = kLinearPaths[k];
    for (size_t i = 0; i < t.rows.size(); ++i) {
      const int m = t.rows[i];
      if (m > max_rows(spec.flow, o)) continue;
      // Each tiling at each distinct split count the clamping leaves; the fastest stays (ties: the
      // earlier tiling, then the fewer splits).
      for (const Tiling& tiling : gen::linear_sweep_tilings(spec, m, limits, o.tilings_per_point)) {
        std::set<int> tried;
        for (int asked : o.splits) {
          const int splits = gen::linear_split(spec, tiling, m, asked, o.sm_count).splits;
          if (!tried.insert(splits).second) continue;
          const double us = time_point(timer, spec, tiling, m, splits);
          const bool same_tiling = tiling == t.tilings[k][i];
          if (std::isfinite(us) && (!std::isfinite(t.us[k][i]) || us < t.us[k][i] ||
                                    (us == t.us[k][i] && same_tiling && splits < t.splits[k][i]))) {
            t.us[k][i] = us;
            t.splits[k][i] = splits;
            t.tilings[k][i] = tiling;
          }
        }
      }
      if (t.tilings[k][i].block_m == 0) t.tilings[k][i] = gen::linear_tiling(spec, m, limits);   // all failed
      if (o.progress) o.progress(++done, total, "m" + std::to_string(m) + " " + to_string(spec.flow));
    }
  }
  t.choice = find_crossings(t.rows, t.us);
  return t;
}

LinearDispatch::LinearDispatch(const LinearTable& t) {
  const size_t paths = std::size(kLinearPaths);
  if (t.rows.empty() || t.us.size() != paths || t.splits.size() != paths || t.choice.crossings.size() != paths - 1)
    throw_bad_input("linear dispatch: the table of '" + t.family + "' has no rows or not one curve per dataflow");
  index_.assign(kMaxLinearTunedRows + 1, 0);
  for (int m = 1; m <= kMaxLinearTunedRows; ++m) {
    size_t path = 0;
    while (path + 1 < paths && m >= t.choice.crossings[path]) ++path;
    // The split count and tiling measured for this path at the largest measured m <= m, else the
    // smallest measured; the tiling only where its rows per CTA are m's.
    int splits = 0;
    Tiling tiling{0, 0, 0, 0};
    for (size_t i = 0; i < t.rows.size(); ++i)
      if (t.splits[path][i] > 0 && (t.rows[i] <= m || splits == 0)) splits = t.splits[path][i], tiling = t.tilings[path][i];
    LinearChoice c;
    c.flow = kLinearPaths[path];
    c.splits = splits;
    if (tiling.block_m == gen::linear_block_m(c.flow, m)) c.tiling = tiling;
    auto it = std::find_if(choices_.begin(), choices_.end(), [&](const LinearChoice& x) {
      return x.flow == c.flow && x.splits == c.splits && x.tiling == c.tiling;
    });
    if (it == choices_.end()) {
      if (choices_.size() == 255) throw_bad_input("linear dispatch: more than 255 distinct choices");
      choices_.push_back(c);
      it = choices_.end() - 1;
    }
    index_[static_cast<size_t>(m)] = static_cast<std::uint8_t>(it - choices_.begin());
  }
  index_[0] = index_[1];
}

LinearChoice LinearDispatch::choose(int m) const {
  if (choices_.empty()) return {};
  return choices_[index_[static_cast<size_t>(std::clamp(m, 1, kMaxLinearTunedRows))]];
}

}  // namespace qattn

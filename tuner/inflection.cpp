// The decision logic of include/qattn/inflection.hpp: family keys, buckets, the decode paths, the
// crossing search, the split choice and the O(1) dispatch tables.
#include "qattn/inflection.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "qattn/error.hpp"
#include "generator/search_space.hpp"

namespace qattn {
namespace {

bool ran(double us) { return std::isfinite(us) && us > 0; }

int clamp_int(long long v, int lo, int hi) { return static_cast<int>(std::min<long long>(std::max<long long>(v, lo), hi)); }

}  // namespace

std::string decode_family_key(const Spec& spec) {
  if (spec.phase != Phase::decode)
    throw_bad_input("decode decisions are made for decode specs; got '" + to_string(spec) + "'");
  Spec family = spec;
  family.flow = Dataflow::automatic;   // the default prints nothing
  family.split_k = 0;
  return to_string(family);
}

int log2_bucket(long long n) {
  int b = 0;
  while (b < 62 && (1LL << b) < n) ++b;
  return b;
}

std::string kv_bucket_text(int kv_len) { return "kv" + std::to_string(kv_len); }

std::string split_bucket_text(long long batch_heads, int kv_len) {
  return "bh" + std::to_string(batch_heads) + "_" + kv_bucket_text(kv_len);
}

Tiling DecodePath::tiling_for_rows(int rows) const {
  if (tilings.empty()) return Tiling{0, 0, 0, 0};
  for (const Tiling& t : tilings)
    if (t.block_m >= rows) return t;
  return tilings.back();
}

std::vector<DecodePath> decode_paths(const Spec& family, const DeviceLimits& limits) {
  if (family.arch == Arch::unset)
    throw_bad_input("decode paths depend on the arch; the spec '" + to_string(family) +
                    "' needs arch=<sm_80|sm_86|sm_89|sm_90|sm_90a>");
  std::vector<DecodePath> paths;
  Spec s = family;
  s.split_k = 0;
  s.flow = Dataflow::gemv;
  if (validate(s)) {
    DecodePath gemv{"gemv", Dataflow::gemv, {}};
    const std::vector<Tiling> candidates = gen::candidate_tilings(s, limits);
    for (int bm : {1, 2, 4, 8}) {
      const auto it = std::find_if(candidates.begin(), candidates.end(), [&](const Tiling& t) { return t.block_m == bm; });
      if (it != candidates.end()) gemv.tilings.push_back(*it);
    }
    if (!gemv.tilings.empty()) paths.push_back(gemv);
  }
  s.flow = Dataflow::mma;
  if (validate(s)) {
    const std::vector<Tiling> candidates = gen::candidate_tilings(s, limits);
    for (int bm : {16, 32, 64}) {
      const auto it = std::find_if(candidates.begin(), candidates.end(), [&](const Tiling& t) { return t.block_m == bm; });
      if (it != candidates.end()) paths.push_back({"mma_bm" + std::to_string(bm), Dataflow::mma, {*it}});
    }
  }
  return paths;
}

CrossingChoice find_crossings(const std::vector<int>& rows, const std::vector<std::vector<double>>& us) {
  const size_t paths = us.size(), n = rows.size();
  if (paths == 0) throw_bad_input("find_crossings needs at least one path");
  for (size_t k = 0; k < paths; ++k)
    if (us[k].size() != n)
      throw_bad_input("find_crossings: path " + std::to_string(k) + " has " + std::to_string(us[k].size()) +
                      " times for " + std::to_string(n) + " rows; accepted: one time per row");
  for (size_t i = 0; i < n; ++i)
    if (rows[i] < 1 || (i > 0 && rows[i] <= rows[i - 1]))
      throw_bad_input("find_crossings: rows must be >= 1 and strictly ascending; row " + std::to_string(i) + " is " +
                      std::to_string(rows[i]));

  // cost[i][k]: how much slower path k is than the best path at point i (1 = the best). Relative costs
  // weigh every M equally, whatever its absolute time.
  std::vector<std::vector<double>> cost(n, std::vector<double>(paths, 0.0));
  for (size_t i = 0; i < n; ++i) {
    double best = INFINITY;
    for (size_t k = 0; k < paths; ++k)
      if (ran(us[k][i])) best = std::min(best, us[k][i]);
    if (!std::isfinite(best)) continue;   // nothing ran here: no evidence either way
    for (size_t k = 0; k < paths; ++k) cost[i][k] = ran(us[k][i]) ? us[k][i] / best : kFailedPointCost;
  }

  // total[i][k]: the least cost of points 0..i with point i on path k and the paths non-decreasing.
  // from[i][k]: the path of point i-1 in that assignment (the earliest on ties).
  std::vector<std::vector<double>> total(n, std::vector<double>(paths, 0.0));
  std::vector<std::vector<int>> from(n, std::vector<int>(paths, 0));
  // Strictly less beyond rounding, so that equal totals reached in another order still tie.
  const auto less = [](double a, double b) { return std::isinf(b) ? a < b : a < b - 1e-12 * std::max(1.0, std::fabs(b)); };
  for (size_t i = 0; i < n; ++i) {
    double prefix_best = INFINITY;
    int prefix_arg = 0;
    for (size_t k = 0; k < paths; ++k) {
      if (i > 0 && less(total[i - 1][k], prefix_best)) {
        prefix_best = total[i - 1][k];
        prefix_arg = static_cast<int>(k);
      }
      total[i][k] = cost[i][k] + (i > 0 ? prefix_best : 0.0);
      from[i][k] = prefix_arg;
    }
  }

  CrossingChoice out;
  out.chosen.assign(n, 0);
  if (n > 0) {
    int k = 0;
    for (size_t j = 1; j < paths; ++j)
      if (less(total[n - 1][j], total[n - 1][static_cast<size_t>(k)])) k = static_cast<int>(j);
    out.cost = total[n - 1][static_cast<size_t>(k)];
    for (size_t i = n; i-- > 0;) {
      out.chosen[i] = k;
      k = from[i][static_cast<size_t>(k)];
    }
  }
  for (size_t k = 0; k + 1 < paths; ++k) {
    int crossing = kNeverRows;
    for (size_t i = 0; i < n; ++i)
      if (out.chosen[i] > static_cast<int>(k)) {
        crossing = i == 0 ? 1 : rows[i];
        break;
      }
    out.crossings.push_back(crossing);
  }
  return out;
}

int choose_splits(const std::vector<int>& splits, const std::vector<double>& us, double tolerance) {
  if (splits.size() != us.size())
    throw_bad_input("choose_splits: " + std::to_string(us.size()) + " times for " + std::to_string(splits.size()) +
                    " split counts; accepted: one time per count");
  if (!(tolerance >= 0 && tolerance < 1))
    throw_bad_input("choose_splits: tolerance " + std::to_string(tolerance) + " is out of range; accepted: 0 <= t < 1");
  double best = INFINITY;
  for (double t : us)
    if (ran(t)) best = std::min(best, t);
  if (!std::isfinite(best)) return 0;
  int chosen = 0;
  for (size_t i = 0; i < splits.size(); ++i)
    if (ran(us[i]) && us[i] <= best * (1 + tolerance) && (chosen == 0 || splits[i] < chosen)) chosen = splits[i];
  return chosen;
}

void DecodeDispatch::set_dataflow(const InflectionTable& table) {
  if (table.paths.empty() || table.buckets.empty())
    throw_bad_input("the dataflow decision for '" + table.family + "' has no paths or no KV buckets");
  std::vector<DecodeChoice> choices;
  std::vector<size_t> first_choice;   // per path, its first tiling's index in `choices`
  for (const DecodePath& p : table.paths) {
    if (p.tilings.empty()) throw_bad_input("decode path '" + p.name + "' has no tiling");
    first_choice.push_back(choices.size());
    for (const Tiling& t : p.tilings) choices.push_back({p.flow, t});
  }
  if (choices.size() > 255) throw_bad_input("a dataflow decision may hold at most 255 tilings");
  const size_t last_path = table.paths.size() - 1;
  for (const DataflowBucket& b : table.buckets)
    if (b.choice.crossings.size() != last_path)
      throw_bad_input("the KV bucket " + kv_bucket_text(b.kv_len) + " of '" + table.family + "' has " +
                      std::to_string(b.choice.crossings.size()) + " crossings for " +
                      std::to_string(table.paths.size()) + " paths; accepted: one fewer than the paths");
  // Filled aside and swapped in at the end, so a rejected table leaves the dispatch as it was.
  decltype(choice_index_) index{};
  for (int kv = 0; kv < kKvBucketCount; ++kv) {
    // The measured bucket nearest in log2 (ties: the smaller): one measured bucket also serves the KV
    // lengths between it and its neighbours, and the ends serve everything beyond them.
    const DataflowBucket* nearest = &table.buckets.front();
    for (const DataflowBucket& b : table.buckets)
      if (std::abs(log2_bucket(b.kv_len) - kv) < std::abs(log2_bucket(nearest->kv_len) - kv)) nearest = &b;
    const std::vector<int>& crossings = nearest->choice.crossings;
    for (int m = 1; m <= kMaxDecodeRows; ++m) {
      size_t path = 0;
      while (path < last_path && m >= crossings[path]) ++path;
      const DecodePath& p = table.paths[path];
      const Tiling t = p.tiling_for_rows(m);
      const size_t within = static_cast<size_t>(std::find(p.tilings.begin(), p.tilings.end(), t) - p.tilings.begin());
      index[static_cast<size_t>(kv)][static_cast<size_t>(m)] = static_cast<std::uint8_t>(first_choice[path] + within);
    }
    index[static_cast<size_t>(kv)][0] = index[static_cast<size_t>(kv)][1];
  }
  choices_ = std::move(choices);
  choice_index_ = index;
}

void DecodeDispatch::set_splits(const SplitTable& table) {
  for (auto& row : splits_) row.fill(0);
  has_splits_ = false;
  struct Cell {
    int bh, kv, splits;
  };
  std::vector<Cell> cells;
  for (const SplitCell& c : table.cells)
    if (c.chosen > 0) cells.push_back({log2_bucket(c.batch_heads), log2_bucket(c.kv_len), c.chosen});
  if (cells.empty()) return;
  int bh_lo = kBatchHeadsBucketCount, bh_hi = -1, kv_lo = kKvBucketCount, kv_hi = -1;
  for (const Cell& c : cells) {
    bh_lo = std::min(bh_lo, c.bh), bh_hi = std::max(bh_hi, c.bh);
    kv_lo = std::min(kv_lo, c.kv), kv_hi = std::max(kv_hi, c.kv);
  }
  for (int bh = std::max(bh_lo, 0); bh <= std::min(bh_hi, kBatchHeadsBucketCount - 1); ++bh)
    for (int kv = std::max(kv_lo, 0); kv <= std::min(kv_hi, kKvBucketCount - 1); ++kv) {
      const Cell* nearest = nullptr;
      int nearest_distance = 0;
      for (const Cell& c : cells) {
        const int d = std::abs(c.bh - bh) + std::abs(c.kv - kv);
        const bool better = !nearest || d < nearest_distance ||
                            (d == nearest_distance && (c.bh < nearest->bh || (c.bh == nearest->bh && c.kv < nearest->kv)));
        if (better) nearest = &c, nearest_distance = d;
      }
      splits_[static_cast<size_t>(bh)][static_cast<size_t>(kv)] = nearest->splits;
    }
  has_splits_ = true;
}

DecodeChoice DecodeDispatch::choose(int rows, int kv_len) const {
  if (choices_.empty()) return DecodeChoice{};
  const int kv = clamp_int(log2_bucket(kv_len), 0, kKvBucketCount - 1);
  const int m = clamp_int(rows, 1, kMaxDecodeRows);
  return choices_[choice_index_[static_cast<size_t>(kv)][static_cast<size_t>(m)]];
}

int DecodeDispatch::splits(long long batch_heads, int kv_len) const {
  if (batch_heads < 1 || kv_len < 1) return 0;
  const int bh = log2_bucket(batch_heads), kv = log2_bucket(kv_len);
  if (bh >= kBatchHeadsBucketCount || kv >= kKvBucketCount) return 0;
  return splits_[static_cast<size_t>(bh)][static_cast<size_t>(kv)];
}

}  // namespace qattn

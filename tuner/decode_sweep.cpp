// The two decode sweeps: they enumerate the points, time them through DecodeTimer and turn the times
// into decisions (find_crossings, choose_splits). A failed point is recorded as NaN, never fatal.
#include <algorithm>
#include <cmath>
#include <set>

#include "qattn/error.hpp"
#include "qattn/inflection.hpp"

namespace qattn {
namespace {

bool power_of_two(long long n) { return n >= 1 && (n & (n - 1)) == 0; }

// A run that throws or returns no usable time is a failed point (NaN). Only "there is no GPU" ends the
// sweep: every later point would fail the same way.
double time_point(DecodeTimer& timer, const Spec& spec, const Tiling& tiling, const Problem& problem, int splits) {
  try {
    const double us = timer.time_us(spec, tiling, problem, splits);
    return std::isfinite(us) && us > 0 ? us : NAN;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::no_gpu) throw;
    return NAN;
  } catch (const std::exception&) {
    return NAN;
  }
}

std::vector<int> kv_buckets(const SweepOptions& o) {
  std::set<int> kv;
  for (int k : o.kv_lens) {
    if (!power_of_two(k))
      throw_bad_input("KV length bucket " + std::to_string(k) + " is not a power of two; accepted: 1024, 4096, ...");
    kv.insert(k);
  }
  if (kv.empty()) throw_bad_input("the decode sweep needs at least one KV length bucket");
  return {kv.begin(), kv.end()};
}

Spec checked_family(const Spec& family, const SweepOptions& o) {
  decode_family_key(family);   // rejects prefill specs
  Spec s = family;
  s.split_k = 0;
  require(validate(s));
  if (o.heads_kv < 1 || o.batch < 1)
    throw_bad_input("the decode sweep needs batch >= 1 and heads_kv >= 1; got batch " + std::to_string(o.batch) +
                    ", heads_kv " + std::to_string(o.heads_kv));
  return s;
}

std::vector<DecodePath> sweep_paths(const Spec& family, const SweepOptions& o) {
  if (!o.paths.empty()) return o.paths;
  const DeviceLimits limits = o.limits.max_smem_per_block > 0 ? o.limits : default_limits(family.arch);
  std::vector<DecodePath> paths = decode_paths(family, limits);
  if (paths.empty()) throw Error(ErrorKind::failure, "no decode tiling fits " + to_string(family) + " on this device");
  return paths;
}

}  // namespace

InflectionTable sweep_dataflow(const Spec& family, const SweepOptions& o, DecodeTimer& timer) {
  const Spec spec = checked_family(family, o);
  const std::vector<int> kvs = kv_buckets(o);
  // Only M = gqa x q_len can be timed with this family's kernels.
  std::set<int> rows_set;
  for (int m : o.rows)
    if (m >= 1 && m <= kMaxDecodeRows && m % spec.gqa == 0) rows_set.insert(m);
  if (rows_set.empty())
    throw_bad_input("no M of the sweep is a multiple of gqa=" + std::to_string(spec.gqa) + " within 1.." +
                    std::to_string(kMaxDecodeRows) + "; M = gqa x q_len");
  const std::vector<int> rows(rows_set.begin(), rows_set.end());

  InflectionTable table;
  table.family = decode_family_key(spec);
  table.batch = o.batch;
  table.heads_kv = o.heads_kv;
  table.paths = sweep_paths(spec, o);
  const int total = static_cast<int>(kvs.size() * rows.size() * table.paths.size());
  int done = 0;
  for (int kv : kvs) {
    DataflowBucket bucket;
    bucket.kv_len = kv;
    bucket.rows = rows;
    bucket.us.assign(table.paths.size(), std::vector<double>(rows.size(), NAN));
    for (size_t i = 0; i < rows.size(); ++i) {
      const Problem problem{o.batch, spec.gqa * o.heads_kv, o.heads_kv, rows[i] / spec.gqa, kv};
      for (size_t k = 0; k < table.paths.size(); ++k) {
        const DecodePath& path = table.paths[k];
        Spec with_flow = spec;
        with_flow.flow = path.flow;
        bucket.us[k][i] = time_point(timer, with_flow, path.tiling_for_rows(rows[i]), problem, 0);
        if (o.progress)
          o.progress(++done, total, kv_bucket_text(kv) + " M" + std::to_string(rows[i]) + " " + path.name);
      }
    }
    bucket.choice = find_crossings(bucket.rows, bucket.us);
    table.buckets.push_back(std::move(bucket));
  }
  return table;
}

SplitTable sweep_splits(const Spec& family, const SweepOptions& o, DecodeTimer& timer, const InflectionTable* dataflow) {
  const Spec spec = checked_family(family, o);
  const std::vector<int> kvs = kv_buckets(o);
  if (o.q_len < 1 || o.q_len > kMaxDecodeRows)
    throw_bad_input("split sweep q_len " + std::to_string(o.q_len) + " is out of range; accepted: 1..64");
  if (!(o.tolerance >= 0 && o.tolerance < 1))
    throw_bad_input("split tolerance " + std::to_string(o.tolerance) + " is out of range; accepted: 0 <= t < 1");
  std::set<long long> bhs;
  for (long long bh : o.batch_heads) {
    if (!power_of_two(bh) || bh > (1LL << 30))
      throw_bad_input("batch x heads_kv bucket " + std::to_string(bh) + " is not a power of two up to 2^30; accepted: 1, 2, 4, ...");
    bhs.insert(bh);
  }
  std::set<int> counts;
  for (int s : o.splits) {
    if (s < 1) throw_bad_input("split count " + std::to_string(s) + " is below 1; accepted: 1, 2, 4, ...");
    counts.insert(s);
  }
  if (bhs.empty() || counts.empty()) throw_bad_input("the split sweep needs batch x heads_kv buckets and split counts");

  // The kernel each cell is timed with: what the dataflow decision dispatches for these rows, else the
  // family's own flow (an undecided flow compiles as mma) with its smallest tile holding the rows.
  DecodeDispatch dispatch;
  if (dataflow) dispatch.set_dataflow(*dataflow);
  DecodePath own{"own", spec.flow == Dataflow::gemv ? Dataflow::gemv : Dataflow::mma, {}};
  if (!dataflow)
    for (const DecodePath& p : sweep_paths(spec, o))
      if (p.flow == own.flow) own.tilings.insert(own.tilings.end(), p.tilings.begin(), p.tilings.end());
  if (!dataflow && own.tilings.empty())
    throw Error(ErrorKind::failure, "no " + std::string(to_string(own.flow)) + " tiling fits " + to_string(spec));
  std::sort(own.tilings.begin(), own.tilings.end(), [](const Tiling& a, const Tiling& b) { return a.block_m < b.block_m; });
  const int rows = spec.gqa * o.q_len;

  SplitTable table;
  table.family = decode_family_key(spec);
  table.q_len = o.q_len;
  table.tolerance = o.tolerance;
  int total = 0, done = 0;
  for (int kv : kvs)
    for (int s : counts) total += static_cast<int>(bhs.size()) * (s == 1 || kv / s >= o.min_split_tokens);
  for (long long bh : bhs)
    for (int kv : kvs) {
      SplitCell cell;
      cell.batch_heads = bh;
      cell.kv_len = kv;
      const DecodeChoice c = dataflow ? dispatch.choose(rows, kv) : DecodeChoice{own.flow, own.tiling_for_rows(rows)};
      cell.flow = c.flow;
      cell.tiling = c.tiling;
      const int heads_kv = static_cast<int>(std::min<long long>(bh, o.heads_kv));
      const Problem problem{static_cast<int>(std::max<long long>(1, bh / heads_kv)), spec.gqa * heads_kv, heads_kv,
                            o.q_len, std::max(kv, o.q_len)};
      Spec with_flow = spec;
      with_flow.flow = c.flow;
      for (int s : counts) {
        // Splits shorter than min_split_tokens only add combine work (and the runtime clamps them anyway).
        if (s > 1 && kv / s < o.min_split_tokens) continue;
        cell.splits.push_back(s);
        cell.us.push_back(time_point(timer, with_flow, c.tiling, problem, s));
        if (o.progress) o.progress(++done, total, split_bucket_text(bh, kv) + " splits " + std::to_string(s));
      }
      cell.chosen = choose_splits(cell.splits, cell.us, o.tolerance);
      table.cells.push_back(std::move(cell));
    }
  return table;
}

}  // namespace qattn

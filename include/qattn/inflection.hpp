// Decode dataflow inflection points and split-K decisions (FlashDecoding++'s "heuristic dataflow",
// research/003-flashdecodingpp.md §5), measured offline and looked up in O(1) at dispatch time.
//
// The rows that share a KV head, M = gqa x q_len (1..64), decide which kernel reads the cache best: the
// CUDA-core GEMV kernel (flow=gemv, 1/2/4/8 rows per CTA, no padding) for few rows, the tensor-core kernel
// (flow=mma, rows padded to 16) for more, a larger mma tile for more still. A sweep times every such
// "path" for each M and KV length bucket; the crossings M1 <= M2 <= ... are then chosen by a dynamic
// program over monotone assignments (path k serves M in [M_k, M_k+1)), so one noisy or non-monotonic
// point cannot flip a decision, and a path that never wins gets an empty range. Split-K counts are chosen
// per (batch x heads_kv, KV length) bucket from timed split counts, preferring fewer splits within a
// tolerance of the fastest.
//
// All of this is CPU logic: the GPU is reached only through DecodeTimer (implemented by the runtime), so
// the tests drive it with fakes. Decisions are stored in the cache as JSON (to_json / from_json below)
// under kind "decode_dataflow" or "decode_splits" and key decode_family_key(spec).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "qattn/export.h"
#include "qattn/problem.hpp"
#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"
#include "qattn/validate.hpp"

QATTN_PUBLIC_BEGIN
namespace qattn {

constexpr int kMaxDecodeRows = 64;     // M = gqa x q_len handled by the decode kernels
constexpr int kNeverRows = kMaxDecodeRows + 1;   // a crossing that is never reached
constexpr int kKvBucketCount = 32;     // KV length buckets 2^0 .. 2^31 (log2 index)
constexpr int kBatchHeadsBucketCount = 41;   // batch x heads_kv buckets 2^0 .. 2^40
constexpr const char* kDecodeDataflowKind = "decode_dataflow";
constexpr const char* kDecodeSplitsKind = "decode_splits";

// The decision key of a decode spec: its canonical text without flow= and splitk= (the two things the
// decisions choose). Throws bad_input for a prefill spec.
std::string decode_family_key(const Spec& spec);

// Buckets are powers of two. log2_bucket(n) = ceil(log2(n)) for n >= 1 (0 for n <= 1), so a size belongs
// to the smallest power of two holding it, as problem_bucket() does. Texts: "kv4096", "bh64_kv4096".
int log2_bucket(long long n);
std::string kv_bucket_text(int kv_len);
std::string split_bucket_text(long long batch_heads, int kv_len);

// One way to compute M rows of a KV head. Paths are ordered by tile size (gemv, mma bm16, mma bm32 ...);
// a path holds one tiling per rows-per-CTA it can use, and serves M rows with the smallest tile holding
// them (else the largest, in several row blocks), as the runtime's own choice does for gemv.
struct DecodePath {
  std::string name;   // "gemv", "mma_bm16", "mma_bm32"
  Dataflow flow = Dataflow::mma;
  std::vector<Tiling> tilings;   // ascending block_m
  Tiling tiling_for_rows(int rows) const;
  bool operator==(const DecodePath& o) const { return name == o.name && flow == o.flow && tilings == o.tilings; }
};

// The paths a family can take on this device: gemv (the first preferred tiling of each valid block_m of
// 1, 2, 4, 8), then one mma path per valid block_m of 16, 32, 64. Paths with no valid tiling are left out.
std::vector<DecodePath> decode_paths(const Spec& family, const DeviceLimits& limits);

// ---- Inflection search -------------------------------------------------------------------------------

struct CrossingChoice {
  // crossings[k] (k = 0 .. paths-2): the first M served by a path after k. Path k serves
  // [crossings[k-1], crossings[k]) with crossings[-1] = 1 and crossings[paths-1] = kNeverRows; equal
  // neighbours mean an empty range. Below the first measured M the first measured choice is extended.
  std::vector<int> crossings;
  std::vector<int> chosen;   // per measured point, the path index (non-decreasing)
  double cost = 0;           // sum over points of time(chosen) / best time (= point count when optimal)
};

// us[path][point]: median microseconds, NaN (or <= 0, or infinite) where that path failed at that point;
// rows ascending. Minimizes the summed relative cost over monotone assignments; a failed point costs
// kFailedPointCost, so a path is only taken where it ran. Points where every path failed carry no
// information and cost nothing. Ties go to the earlier path (later crossings). Throws bad_input when
// the shapes disagree or rows are not strictly ascending.
constexpr double kFailedPointCost = 1e6;
CrossingChoice find_crossings(const std::vector<int>& rows, const std::vector<std::vector<double>>& us);

// The fastest split count, preferring the fewest within `tolerance` (relative) of the fastest: extra
// splits cost a combine and launch slots, and a 1-3% edge is noise. 0 when every count failed.
int choose_splits(const std::vector<int>& splits, const std::vector<double>& us, double tolerance);

// ---- Decisions (what the cache stores) -------------------------------------------------------------

struct DataflowBucket {
  int kv_len = 0;                        // a power of two
  std::vector<int> rows;                 // measured M, ascending
  std::vector<std::vector<double>> us;   // [path][point], NaN = failed
  CrossingChoice choice;
};

struct InflectionTable {
  std::string family;                    // decode_family_key
  int batch = 1, heads_kv = 8;           // the timed problem (heads_q = gqa x heads_kv, q_len = M / gqa)
  std::vector<DecodePath> paths;
  std::vector<DataflowBucket> buckets;   // ascending kv_len
};

struct SplitCell {
  long long batch_heads = 0;   // a power of two
  int kv_len = 0;              // a power of two
  Dataflow flow = Dataflow::mma;
  Tiling tiling;               // the kernel the counts were timed with
  std::vector<int> splits;     // ascending
  std::vector<double> us;      // NaN = failed
  int chosen = 0;              // choose_splits(splits, us, tolerance); 0 = every count failed
};

struct SplitTable {
  std::string family;
  int q_len = 1;               // new tokens per sequence of the timed problems (M = gqa x q_len)
  double tolerance = 0.03;
  std::vector<SplitCell> cells;   // ascending (batch_heads, kv_len)
};

// JSON (nlohmann). Shapes, version 1 ("us" entries are null where the run failed):
//   decode_dataflow: {"format":"qattn.decode_dataflow","version":1,"family":"decode qk=...",
//     "batch":1,"heads_kv":8,
//     "paths":[{"name":"gemv","flow":"gemv","tilings":["bm1_bn32_w4_s3",...]},...],
//     "buckets":[{"kv":4096,"rows":[1,2,...],"us":[[..per row..],..per path..],
//                 "crossings":[8,24],"chosen":["gemv",...per row],"cost":16.2},...]}
//   decode_splits: {"format":"qattn.decode_splits","version":1,"family":"...","q_len":1,"tolerance":0.03,
//     "cells":[{"bh":64,"kv":4096,"flow":"gemv","tiling":"bm4_bn32_w4_s3","splits":[1,2,4],
//               "us":[50.1,33.0,null],"chosen":2},...]}
// from_json throws qattn::Error(bad_input), one line naming the field and what is accepted.
void to_json(nlohmann::json& j, const InflectionTable& t);
void from_json(const nlohmann::json& j, InflectionTable& t);
void to_json(nlohmann::json& j, const SplitTable& t);
void from_json(const nlohmann::json& j, SplitTable& t);
// Text forms (what goes into the cache's json column); the parsers also reject text that is not JSON.
std::string dump_decision(const InflectionTable& t);
std::string dump_decision(const SplitTable& t);
InflectionTable parse_inflection_table(std::string_view json_text);
SplitTable parse_split_table(std::string_view json_text);

// ---- Dispatch ------------------------------------------------------------------------------------------

struct DecodeChoice {
  Dataflow flow = Dataflow::mma;
  Tiling tiling = Tiling{0, 0, 0, 0};   // block_m 0: no decision (the runtime's own choice)
};

// Built once from the decisions; lookups index fixed arrays by M and log2 buckets (no maps, no strings).
class DecodeDispatch {
 public:
  DecodeDispatch() = default;
  // A KV length is served by the measured bucket nearest in log2 (ties: the smaller), clamped at both
  // ends; M is clamped to 1..kMaxDecodeRows.
  void set_dataflow(const InflectionTable& table);
  // A (batch x heads_kv, KV length) is served by the nearest measured cell (log2 distance summed over
  // both axes; ties: smaller batch_heads, then smaller kv) when it lies within the measured range on
  // both axes; outside it there is no decision (splits() == 0).
  void set_splits(const SplitTable& table);
  bool has_dataflow() const { return !choices_.empty(); }
  bool has_splits() const { return has_splits_; }

  // No dataflow decision: DecodeChoice{} (block_m 0, the runtime's choice).
  DecodeChoice choose(int rows, int kv_len) const;
  // 0: no decision, use the heuristic (plan_decode_splits).
  int splits(long long batch_heads, int kv_len) const;

 private:
  std::vector<DecodeChoice> choices_;   // every (path, tiling) the table can pick; < 256 of them
  std::array<std::array<std::uint8_t, kMaxDecodeRows + 1>, kKvBucketCount> choice_index_{};   // [kv][M]
  std::array<std::array<std::int32_t, kKvBucketCount>, kBatchHeadsBucketCount> splits_{};
  bool has_splits_ = false;
};

// ---- Sweeps --------------------------------------------------------------------------------------------

// The GPU side: the median time of one decode call, microseconds. splits 0: the runtime's own plan.
// A failed run returns NaN or throws; either is recorded as a failed point, not an error.
class DecodeTimer {
 public:
  virtual ~DecodeTimer() = default;
  virtual double time_us(const Spec& spec_with_flow, const Tiling& tiling, const Problem& problem, int splits) = 0;
};

struct SweepOptions {
  // Both sweeps.
  std::vector<int> kv_lens = {1024, 4096, 16384, 65536, 262144};   // powers of two
  int heads_kv = 8;
  std::vector<DecodePath> paths;   // empty: decode_paths(family, limits)
  DeviceLimits limits;             // max_smem_per_block 0: default_limits(family.arch)
  // Called after each timed point: (points done, points in all, "kv4096 M8 gemv").
  std::function<void(int, int, const std::string&)> progress;
  // Dataflow sweep: the M values; only multiples of the family's gqa up to gqa x 64 can be timed (q_len
  // = M / gqa), the others are skipped.
  std::vector<int> rows = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64};
  int batch = 1;
  // Split sweep: batch x heads_kv buckets (batch = bh / heads_kv, at least 1; heads_kv = min(bh, heads_kv)),
  // the counts tried (only those leaving >= min_split_tokens tokens per split), new tokens per sequence.
  std::vector<long long> batch_heads = {1, 4, 16, 64, 256, 1024};
  std::vector<int> splits = {1, 2, 4, 8, 16, 32, 64, 128};
  int min_split_tokens = 256;
  int q_len = 1;
  double tolerance = 0.03;
};

// Times every (kv bucket, M, path) and chooses the crossings per bucket. Throws bad_input for a prefill
// family, an option out of range, or no timeable M.
InflectionTable sweep_dataflow(const Spec& family, const SweepOptions& options, DecodeTimer& timer);
// Times the split counts per (batch_heads, kv) cell with the kernel `dataflow` dispatches for M = gqa x
// q_len (null: the family's own flow, its path's tiling for M).
SplitTable sweep_splits(const Spec& family, const SweepOptions& options, DecodeTimer& timer,
                        const InflectionTable* dataflow = nullptr);

// ---- Report --------------------------------------------------------------------------------------------

// A fixed-width text table: per KV bucket the crossings (path ranges), then the split table if given.
std::string report_text(const InflectionTable* dataflow, const SplitTable* splits);
// A self-contained SVG: one panel per KV bucket, time vs M (log2 axis), one coloured polyline per path,
// dashed lines at the crossings, a legend and a title naming the family and `device`.
std::string report_svg(const InflectionTable& dataflow, const std::string& device);

}  // namespace qattn
QATTN_PUBLIC_END

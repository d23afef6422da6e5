// The inflection points of a linear layer (FlashDecoding++ §5): for one weight shape [N, K], format and
// device, the tuner times the three dataflows over M = 1 .. 8192 tokens, GEMV (ImplA), flat GEMM (ImplB)
// and tiled GEMM (ImplC), each at its best split-K count, and finds M1 (flat overtakes gemv) and M2
// (gemm overtakes flat) with the same monotone search as attention decode (find_crossings,
// include/qattn/inflection.hpp): one noisy or non-monotonic point cannot flip a decision, and M1 <= M2
// always. The runtime then dispatches any m in O(1) and never times on the hot path.
//
// All of this is CPU logic: the GPU is reached only through LinearTimer (implemented by the runtime), so
// the tests drive it with fakes. The table is stored in the cache as JSON under kind "linear_dataflow"
// and key linear_family_key(spec).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "qattn/export.h"
#include "qattn/inflection.hpp"
#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"
#include "qattn/validate.hpp"

QATTN_PUBLIC_BEGIN
namespace qattn {

constexpr const char* kLinearDataflowKind = "linear_dataflow";
constexpr int kMaxLinearTunedRows = 8192;   // m above it takes the choice of 8192
constexpr Dataflow kLinearPaths[] = {Dataflow::gemv, Dataflow::flat, Dataflow::gemm};

// The decision key of a linear spec: its canonical text without flow= (what the table chooses). Throws
// bad_input for an attention spec.
std::string linear_family_key(const Spec& spec);

// The GPU side: the median time of one linear call of m tokens, microseconds. A failed run returns NaN or
// throws; either is recorded as a failed point, not an error.
class LinearTimer {
 public:
  virtual ~LinearTimer() = default;
  virtual double time_us(const Spec& spec_with_flow, const Tiling& tiling, int m, int splits) = 0;
};

struct LinearSweepOptions {
  std::vector<int> rows = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192};
  // Split-K counts tried at each point (each clamped to K's steps, repeats dropped); 0 is the runtime's
  // own heuristic count.
  std::vector<int> splits = {0, 1, 2, 4, 8, 16};
  // Tilings timed at each point: the first this many candidates with the point's rows per CTA (the
  // untuned one first), each at every split count; 1 times the untuned tiling alone.
  int tilings_per_point = 4;
  // A dataflow is timed up to its largest sensible m (gemv rereads W once per 8 tokens, flat per 16);
  // beyond, its points are failed (never chosen).
  int gemv_max_rows = 64;
  int flat_max_rows = 1024;
  DeviceLimits limits;   // max_smem_per_block 0: default_limits(family.arch)
  int sm_count = 132;    // the heuristic split count's device
  std::function<void(int, int, const std::string&)> progress;   // (points done, in all, "m8 flat")
};

struct LinearTable {
  std::string family;                       // linear_family_key
  std::vector<int> rows;                    // measured m, ascending
  std::vector<std::vector<double>> us;      // [path][point] (gemv, flat, gemm), NaN = failed or not timed
  std::vector<std::vector<Tiling>> tilings; // [path][point] the fastest tiling timed
  std::vector<std::vector<int>> splits;     // [path][point] the fastest split count (0 = failed)
  CrossingChoice choice;                    // crossings {M1, M2}; chosen path per point
  int m1() const { return choice.crossings.size() > 0 ? choice.crossings[0] : kMaxLinearTunedRows + 1; }
  int m2() const { return choice.crossings.size() > 1 ? choice.crossings[1] : kMaxLinearTunedRows + 1; }
};

// Times every path at every m (each at its untuned tiling for m and its best split count) and chooses the
// crossings. Throws bad_input for an invalid family or empty rows; a failed point is NaN.
LinearTable sweep_linear(const Spec& family, const LinearSweepOptions& options, LinearTimer& timer);

// JSON, version 1 ("us" entries null where failed):
//   {"format":"qattn.linear_dataflow","version":1,"family":"linear a=fp16 ...","paths":["gemv","flat","gemm"],
//    "rows":[1,2,...],"us":[[..per row..],..per path..],"tilings":[[...]],"splits":[[...]],
//    "crossings":[6,96],"chosen":["gemv",...],"cost":21.0}
// from_json throws qattn::Error(bad_input), one line naming the field and what is accepted.
void to_json(nlohmann::json& j, const LinearTable& t);
void from_json(const nlohmann::json& j, LinearTable& t);
std::string dump_decision(const LinearTable& t);
LinearTable parse_linear_table(std::string_view json_text);

// `qattn report`: a table of the measured times and the choice per m, and an SVG of the three curves
// with M1 and M2 marked.
std::string report_text(const LinearTable& table);
std::string report_svg(const LinearTable& table, const std::string& device);

struct LinearChoice {
  Dataflow flow = Dataflow::automatic;   // automatic: no decision (the default rule)
  Tiling tiling = Tiling{0, 0, 0, 0};    // block_m 0: the untuned tiling of the flow for m
  int splits = 0;                        // 0: the heuristic count
};

// Built once from a table; choose(m) indexes a fixed array by m (no maps, no strings): the path the
// crossings give m, and the split count and tiling measured for that path at the largest measured m <= m
// (else the smallest measured). The tiling is kept only where its rows per CTA are the ones m takes
// (gen::linear_block_m); elsewhere it is left to the runtime's untuned rule (block_m 0).
class LinearDispatch {
 public:
  LinearDispatch() = default;
  explicit LinearDispatch(const LinearTable& table);
  bool empty() const { return choices_.empty(); }
  LinearChoice choose(int m) const;

 private:
  std::vector<LinearChoice> choices_;   // distinct (flow, tiling, splits); < 256
  std::vector<std::uint8_t> index_;     // [m], m in 0 .. kMaxLinearTunedRows
};

}  // namespace qattn
QATTN_PUBLIC_END

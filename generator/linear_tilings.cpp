// The tilings of the linear kernels (templates/qattn/linear/linear_shape.h says what each field means
// per dataflow), the untuned choice for m tokens, and the untuned split-K count.
#include <algorithm>

#include "generator/search_space.hpp"
#include "qattn/error.hpp"
#include "qattn/linear.hpp"
#include "qattn/linear/linear_shape.h"

namespace qattn {
namespace {

// Hand-ordered per dataflow, the header's recommended tilings first (each bm's first entry is what a
// call with that many tokens takes untuned), then neighbours for the tuner.
std::vector<Tiling> preferred_linear(const Spec& s) {
  const bool int4 = s.weight.fmt == Fmt::int4;
  const bool bits16 = s.weight.fmt == Fmt::fp16 || s.weight.fmt == Fmt::bf16;
  std::vector<Tiling> out;
  switch (s.flow) {
    case Dataflow::gemv: {
      // bn = warps x the rows a warp streams at once (linear_shape.h, gemv_rows): 4 at bm 1 (and bm 2 but
      // for int4), else 2.
      const int rows2 = int4 ? 2 : 4;
      out.insert(out.end(), {{1, 16, 4, int4 ? 2 : 4}, {1, 16, 4, int4 ? 4 : 2}, {1, 8, 2, 4}, {1, 4, 1, 4}});
      out.insert(out.end(), {{2, 4 * rows2, 4, 2}, {2, 4 * rows2, 4, 4}, {2, 2 * rows2, 2, 2}});
      for (int bm : {4, 8}) out.insert(out.end(), {{bm, 8, 4, 2}, {bm, 8, 4, 3}, {bm, 4, 2, 2}});
      break;
    }
    case Dataflow::flat:
      for (int bm : {8, 16})
        out.insert(out.end(), {{bm, 128, 4, int4 ? 3 : 4}, {bm, 64, 4, int4 ? 3 : 4}, {bm, 128, 4, 2}, {bm, 256, 8, 3},
                               {bm, 64, 2, 4}});
      break;
    case Dataflow::gemm: {
      // bm 128 for many tokens, bm 64 below 512 (linear_block_m), each first in its own list. On sm_90a the
      // warpgroup form (_wg) comes first: only wgmma reaches the H100's tensor-core peak (validate() drops
      // it elsewhere). int4's dequantized tiles leave room for 3 stages at bm 128; at bm 64 two warpgroups
      // share the dequantization.
      const auto wg = [](int bm, int bn, int w, int st) { return Tiling{bm, bn, w, st, true}; };
      if (int4)
        out.insert(out.end(), {wg(128, 128, 8, 3), wg(64, 128, 8, 3), wg(64, 128, 4, 4), wg(128, 128, 8, 2)});
      else
        out.insert(out.end(), {wg(128, 128, 8, 4), wg(64, 128, 4, 4), wg(128, 256, 8, bits16 ? 4 : 3), wg(128, 128, 8, 5),
                               wg(64, 128, 8, 3)});
      out.insert(out.end(), {{128, 128, 8, int4 ? 2 : 3}, {64, 128, 4, int4 ? 3 : 4}, {128, 256, 8, 3}, {128, 128, 8, 4},
                             {64, 64, 4, 4}, {64, 128, 4, 3}});
      break;
    }
    default: break;
  }
  return out;
}

}  // namespace

Dataflow default_linear_flow(int m) {
  return m < kDefaultLinearM1 ? Dataflow::gemv : m < kDefaultLinearM2 ? Dataflow::flat : Dataflow::gemm;
}

namespace gen {

std::vector<Tiling> linear_candidates(const Spec& spec, const DeviceLimits& limits) {
  std::vector<Tiling> valid;
  for (const Tiling& t : preferred_linear(spec))
    if (validate(spec, t, limits) && std::find(valid.begin(), valid.end(), t) == valid.end()) valid.push_back(t);
  return valid;
}

int linear_block_m(Dataflow flow, int m) {
  switch (flow) {
    case Dataflow::gemv: {
      int bm = 1;
      while (bm < m && bm < 8) bm *= 2;
      return bm;
    }
    case Dataflow::flat: return m <= 8 ? 8 : 16;
    default: return m < 512 ? 64 : 128;
  }
}

std::vector<Tiling> linear_sweep_tilings(const Spec& spec, int m, const DeviceLimits& limits, int count) {
  const std::vector<Tiling> c = linear_candidates(spec, limits);
  if (c.empty()) throw Error(ErrorKind::failure, "no linear tiling fits " + to_string(spec) + " within the device limits");
  const int bm = linear_block_m(spec.flow, m);
  std::vector<Tiling> out;
  for (const Tiling& t : c)
    if (t.block_m == bm && static_cast<int>(out.size()) < std::max(1, count)) out.push_back(t);
  if (out.empty()) out.push_back(c.front());
  return out;
}

Tiling linear_tiling(const Spec& spec, int m, const DeviceLimits& limits) {
  return linear_sweep_tilings(spec, m, limits, 1).front();
}

LinearSplit linear_split(const Spec& spec, const Tiling& tiling, int m, int requested, int sm_count) {
  const int step = linear::linear_k_step(spec.flow, spec.weight.fmt, tiling.block_n, tiling.warps);
  const int steps = (spec.k + step - 1) / step;
  int splits = requested;
  if (splits <= 0) {
    // Enough CTAs for two per SM, each split keeping >= kMinStepsPerSplit steps of K (a split's fixed
    // cost, its partial tile's write and read back, needs that much work behind it).
    constexpr int kMinStepsPerSplit = 8;
    const long long tiles =
        static_cast<long long>((spec.n + tiling.block_n - 1) / tiling.block_n) * ((m + tiling.block_m - 1) / tiling.block_m);
    const long long want = (2LL * std::max(1, sm_count) + tiles - 1) / tiles;
    splits = static_cast<int>(std::min<long long>(want, std::max(1, steps / kMinStepsPerSplit)));
  }
  splits = std::clamp(splits, 1, steps);
  LinearSplit out;
  out.k_split = (steps + splits - 1) / splits * step;
  out.splits = (spec.k + out.k_split - 1) / out.k_split;   // no empty split
  return out;
}

}  // namespace gen
}  // namespace qattn

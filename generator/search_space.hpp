// Which tilings exist for a spec on an arch, which one is the untuned default, and the default grid of
// specs that `qattn compile --grid default` and the tests sweep.
#pragma once
#include <vector>

#include "qattn/problem.hpp"
#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"
#include "qattn/validate.hpp"

namespace qattn::gen {

// Every tiling valid for (spec, limits), best guess first. Empty when the spec itself is invalid.
std::vector<Tiling> candidate_tilings(const Spec& spec, const DeviceLimits& limits);

// qattn::default_tiling (the first candidate) is public: include/qattn/validate.hpp.

// `chosen` where its launch grid fits `problem` (grid_fits, render.hpp); else the first candidate whose
// grid does (the causal wgmma form past 65535 query tiles: one with a larger bm, or an mma.sync tiling,
// whose query tiles are in x). Throws bad_input with grid_fits's reason when none does.
Tiling launchable_tiling(const Spec& spec, const Problem& problem, const Tiling& chosen, const DeviceLimits& limits);

// The untuned tiling of a decode launch whose KV heads each carry `rows` query rows (gqa x q_len): the
// default when the rows are the spec's own (q_len 1), so every spill repair and rule reaches decode;
// else the first candidate whose bm holds the rows (mma: one m16 tile when they fit; gemv: the smallest
// of 1/2/4/8 rows per CTA that holds them, since each extra row block reads the head's K and V again).
Tiling decode_tiling(const Spec& spec, int rows, const DeviceLimits& limits);

// Linear layers (generator/linear_tilings.cpp). The candidates of a spec with a concrete flow (none for
// flow=auto: a request, not a kernel), best guess first.
std::vector<Tiling> linear_candidates(const Spec& spec, const DeviceLimits& limits);
// The rows per CTA an untuned call of m tokens takes: gemv the smallest of 1/2/4/8 holding them, flat 8 or
// 16, gemm 64 below 512 tokens, else 128.
int linear_block_m(Dataflow flow, int m);
// The untuned tiling for m tokens: the first candidate with linear_block_m's rows.
Tiling linear_tiling(const Spec& spec, int m, const DeviceLimits& limits);
// The tilings the linear sweep times for m tokens: the first `count` candidates with linear_block_m's
// rows, the untuned one first (the first candidate alone where none has those rows).
std::vector<Tiling> linear_sweep_tilings(const Spec& spec, int m, const DeviceLimits& limits, int count);
// Split-K of a linear launch: requested > 0 taken (clamped to K's steps); else enough CTAs for two per SM,
// each split at least 8 k steps. k_split is a multiple of the kernel's k step, and no split is empty.
struct LinearSplit {
  int splits = 1, k_split = 0;
};
LinearSplit linear_split(const Spec& spec, const Tiling& tiling, int m, int requested, int sm_count);

// The rows of generator/spill_promotions.inc: a kernel-name stem (the name before "__"), the tiling that
// goes first for the specs of that stem, and the listed first one, which spilled.
struct SpillPromotion {
  const char* stem;
  const char* tiling;
  const char* spilled;
};
const std::vector<SpillPromotion>& spill_promotions();

// The default grid: every supported (format, granularity, head dim, causal) point of the shipped kernel
// families, for one arch.
std::vector<Spec> default_grid(Arch arch);   // prefill points, then decode points (phase == decode)

}  // namespace qattn::gen

// The helper kernels around a quantized attention kernel: the quantization passes of Q, K and V (their
// plans come from generator/quant_plan.hpp) and the LSE correction after K smoothing.
#pragma once
#include <array>
#include <vector>

#include "qattn/problem.hpp"
#include "generator/quant_plan.hpp"
#include "generator/render_helpers.hpp"
#include "qattn/spec.hpp"

namespace qattn::rt {

// One quantized operand: the request for the quantizer, its plan, and where its outputs live in the
// workspace (byte offsets, filled in by the caller).
struct QuantSlot {
  gen::QuantRequest request;
  gen::QuantProblem problem;
  gen::QuantPlan plan;
  size_t codes = 0, scales = 0, mean = 0, scratch = 0;   // workspace offsets (scratch: the plan's own)
  int row_bytes = 0;   // bytes per row of codes (packed int4: d/2), filled in by the caller
  bool active = true;   // false: the operand is used as given (V of pv=fp16): no passes, no workspace
};

// Q and K as int8 rows [b, h, s, d] (per_block: groups of 64 tokens; K smoothed when the spec says so);
// V as int8 V^T per head, padded to kVPadTokens (mean subtracted when the spec smooths V; the kernel
// adds it back to O). qk=int4: Q and K codes in [-7, 7] (qmax 7), packed two per byte (rows of d/2
// bytes) when the kernel's tiling runs the packed form (int4_mma = tiling.int4_mma), else one per byte.
// resident_blocks: QuantProblem::resident_blocks of every slot (kOnePassMinBlocks * SMs; 0 keeps the
// statistics passes), which lets smoothing and per_channel scales quantize in one pass.
// k_mean_sample_tokens: K's QuantProblem::mean_sample_tokens (RuntimeOptions::k_mean_sample_tokens;
// 0: K's mean over every token). Q and V never sample.
// q_fused (tiling _qf): the kernel quantizes Q itself, so Q's slot is inactive (no passes, no workspace).
// tma (tiling _tma): the kernel loads K in groups of 16 rows, so K's rows per head are padded to 16.
std::array<QuantSlot, 3> quant_slots(const Spec& spec, const Problem& problem, bool int4_mma, int resident_blocks,
                                     int k_mean_sample_tokens, bool q_fused = false, bool tma = false);

// Which stream runs each operand's passes (rt::ExperimentOptions::concurrent_passes): -1 the caller's, 0 / 1 the
// runtime's side streams. Concurrent: V's passes on side stream 0 whenever another operand has passes too,
// and Q's on side stream 1 when K's run on the caller's; K's always on the caller's (the LSE correction
// after them reads K's mean). Not concurrent, or a single operand with passes: all -1.
std::array<int, 3> pass_lanes(const std::array<QuantSlot, 3>& slots, bool concurrent);

// Every helper kernel attention() launches for `spec` (arch set): for compile-only cache warm-up and tests.
// qk=int4: the quantizers of the arch's default form (int4_mma_by_default, validate.hpp). With
// k_mean_sample_tokens > 0, K's sampled statistics passes (kv_len above the sample) too.
std::vector<gen::Source> helper_sources(const Spec& spec, int k_mean_sample_tokens);

}  // namespace qattn::rt

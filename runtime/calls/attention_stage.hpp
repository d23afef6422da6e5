// What a quantized prefill launches before (and after) its attention kernel, decided once for a call's
// spec, shape, strides and tiling: the quantization passes of Q, K and V with their loaded kernels and
// streams, the workspace layout, and the LSE correction after K smoothing. prepare() and attention()
// decide it per call; an AttentionPlan decides it at plan time, so that a run only does the enqueue.
#pragma once
#include <array>
#include <memory>
#include <vector>

#include "qattn/abi.h"
#include "qattn/runtime.hpp"
#include "runtime/calls/helper_kernels.hpp"
#include "runtime/device/module.hpp"

namespace qattn::rt {

// Quantization passes run concurrently (side streams) only when K and V hold at least this many rows
// (batch x heads_kv x kv_len): below it the fork and join cost more host time than the overlap saves
// (docs/perf.md, "Quantization passes on side streams").
constexpr long long kForkMinRows = 16384;

// K's and V's head statistics take the one-pass form (templates/qattn/quant/head_sync.cuh) when every
// tile of the operand fits in one wave of the GPU (tiles <= SMs): its blocks then never wait on a
// block that has not started, and one launch replaces the statistics pass, its finalize and the
// quantizer, which is what a short, host-bound call pays for.
bool one_pass_fits(const Spec& spec, const Problem& problem, int sm_count);

struct AttentionStage {
  std::array<QuantSlot, 3> slots;
  std::array<std::vector<std::shared_ptr<Kernel>>, 3> passes;   // per operand, plan.launches' kernels
  std::array<int, 3> lane{-1, -1, -1};                          // pass_lanes
  bool fork = false;
  int sides = 0;                // side streams in use when forking
  size_t bytes = 0;             // workspace bytes (256-byte aligned regions)
  // One memset instead of each launch's own (no fork): [zero_begin, zero_begin + zero_bytes) of the
  // workspace; zero_bytes 0: each launch that needs zeroed scratch clears its own.
  size_t zero_begin = 0, zero_bytes = 0;
  bool lse_fix = false;         // K smoothing: q·mean_k per row at `dot`, added to a requested LSE
  size_t dot = 0;
  std::shared_ptr<Kernel> row_dot, lse_add;
};

}  // namespace qattn::rt

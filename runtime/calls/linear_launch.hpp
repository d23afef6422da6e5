// What a linear call launches, decided once (Runtime::Impl::make_linear_launch): route, loaded kernel,
// grid and the parameters but the pointers, and the split-K workspace layout. linear() binds its own
// pointers and issues it on the stream's workspace; a linear plan (Runtime::plan_linear) keeps it and
// binds each run's pointers.
#pragma once
#include <memory>

#include "qattn/abi.h"
#include "qattn/linear.hpp"
#include "runtime/device/module.hpp"

namespace qattn::rt {

class LoadedKernel;   // runtime/registry/runtime_impl.hpp

struct LinearLaunch {
  LinearRoute route;
  std::shared_ptr<LoadedKernel> kernel;
  LinearParams params{};   // strides, sizes, splits; no pointers
  Dim3 grid, block;
  unsigned smem_bytes = 0;
  size_t counter_bytes = 0;     // the tile counters, first in the workspace (256-byte multiple)
  size_t workspace_bytes = 0;   // counters + fp32 partials; 0 with one split
};

// Refuses (bad_input naming `what`) null or misaligned pointers, and scales, zero points or a bias that
// the spec's format does or does not have.
void check_linear_pointers(const Spec& spec, const void* a, const LinearWeights& weights, const void* c, const char* what);
// Queues the launch over m tokens (<= the launch's) with these pointers; with split-K `counters` (counter_bytes,
// zero) and `partials` (workspace_bytes - counter_bytes), else null.
void enqueue_linear(const LinearLaunch& launch, int m, const void* a, const LinearWeights& weights, void* c, int* counters,
                    float* partials, CUstream stream);

}  // namespace qattn::rt

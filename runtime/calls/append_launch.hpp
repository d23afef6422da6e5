// What an append_kv call launches, decided once (Runtime::Impl::make_append_launch): the append kernel
// and, when the call sets K smoothing's vector, the mean kernel before it, with their parameters and
// grids. append_kv() binds its own pointers and issues it; an append plan (Runtime::plan_append) keeps it
// and binds each run's pointers.
#pragma once
#include <memory>

#include "qattn/abi.h"
#include "qattn/decode.hpp"
#include "runtime/calls/kv_cache_view.hpp"
#include "runtime/device/module.hpp"

namespace qattn::rt {

struct AppendLaunch {
  Spec spec;                        // resolved
  std::shared_ptr<Kernel> append;
  std::shared_ptr<Kernel> mean;     // init_k_mean: the mean of the new K tokens first
  KvAppendParams params{};          // the K half's; the V half differs in x, cache, head_scale, k_mean
  KvSmoothParams mean_params{};
  TensorRef v_tokens{};
  KvCacheRef v_cache{};
  const float* v_head_scale = nullptr;
  CacheGeometry geometry;
  Dim3 grid;
  bool by_slot = false;
  bool k_smoothing = false;         // the cache's K rows hold k - k_mean (KvCacheView::k_mean)
};

// The pointers of one call or run, from an AppendKvCall (append_kv()).
AppendRun run_of(const AppendKvCall& call);
// Writes run's pointers into the launch's parameters. Refuses (bad_input, naming `what`) null or
// misaligned pointers, and a run that does not match the plan's write mode (start or slot mapping, K
// smoothing).
void bind_append_run(AppendLaunch& launch, const AppendRun& run, const char* what);
// Queues the launch on `stream`: the mean (init_k_mean), then the K and the V append.
void enqueue_append(const AppendLaunch& launch, CUstream stream);

}  // namespace qattn::rt

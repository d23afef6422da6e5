#include "runtime/calls/append_launch.hpp"

#include <string>

#include "qattn/error.hpp"

namespace qattn::rt {

AppendRun run_of(const AppendKvCall& call) {
  AppendRun r;
  r.k = call.k;
  r.v = call.v;
  take_cache_pointers(r, call.cache);
  r.start = call.start;
  r.slot_mapping = call.slot_mapping;
  return r;
}

void bind_append_run(AppendLaunch& l, const AppendRun& r, const char* what) {
  const Spec& spec = l.spec;
  if (!r.k || !r.v || !r.k_cache || !r.v_cache || (l.by_slot ? !r.slot_mapping : !r.start) ||
      (spec.paged && !l.by_slot && !r.block_table) ||
      (spec.qk.fmt == Fmt::fp8e4m3 && (!r.k_head_scale || !r.v_head_scale)))
    throw_bad_input(std::string(what) + ": k, v, the caches, " + (l.by_slot ? "slot_mapping" : "start") +
                    " (and block_table when paged, the head scales for fp8e4m3:per_head) must be device pointers (one is null)");
  if (l.by_slot ? r.start != nullptr : r.slot_mapping != nullptr)
    throw_bad_input(std::string(what) + ": made to write by " + (l.by_slot ? "slot mapping" : "start") + "; pass " +
                    (l.by_slot ? "slot_mapping, not start" : "start, not slot_mapping"));
  if (!aligned(r.k_cache) || !aligned(r.v_cache)) throw_bad_input(std::string(what) + ": the caches must be 16-byte aligned");
  if (l.k_smoothing != (r.k_mean != nullptr))
    throw_bad_input(std::string(what) + (l.k_smoothing ? ": made for a K-smoothed cache; every run needs its k_mean"
                                                  : ": made for a cache without K smoothing; a run cannot add k_mean"));
  KvAppendParams& p = l.params;
  p.x.ptr = const_cast<void*>(r.k);
  p.cache = cache_ref(r.k_cache, l.geometry);
  p.block_table = spec.paged ? r.block_table : nullptr;
  p.start = r.start;
  p.slot_mapping = r.slot_mapping;
  p.head_scale = r.k_head_scale;
  p.k_mean = r.k_mean;
  l.v_tokens.ptr = const_cast<void*>(r.v);
  l.v_cache = cache_ref(r.v_cache, l.geometry);
  l.v_head_scale = r.v_head_scale;
  l.mean_params.x.ptr = const_cast<void*>(r.k);
  l.mean_params.mean = r.k_mean;
  l.mean_params.slot_mapping = r.slot_mapping;
}

void enqueue_append(const AppendLaunch& l, CUstream stream) {
  if (l.mean)
    l.mean->launch(Dim3{static_cast<unsigned>(l.mean_params.heads_kv), 1, 1}, Dim3{256, 1, 1}, 0, stream, l.mean_params);
  l.append->launch(l.grid, Dim3{128, 1, 1}, 0, stream, l.params);
  KvAppendParams v = l.params;
  v.x = l.v_tokens;
  v.cache = l.v_cache;
  v.head_scale = l.v_head_scale;
  v.k_mean = nullptr;
  l.append->launch(l.grid, Dim3{128, 1, 1}, 0, stream, v);
}

}  // namespace qattn::rt

// Prefill over a KV cache (AttentionCall::kv_cache), decided once: the gather kernel (kv_gather.cuh) that
// reads each sequence's cache rows back as packed 16-bit K and V with their offsets, its launch, and the
// layout of the workspace it writes. attention() runs it in a per-stream workspace; a plan over a cache
// keeps it and runs it in the plan's workspace.
#pragma once
#include <cstddef>
#include <memory>

#include "qattn/abi.h"
#include "qattn/runtime.hpp"
#include "runtime/calls/kv_cache_view.hpp"
#include "runtime/device/module.hpp"

namespace qattn::rt {

// Refuses (bad_input) a prefill over a cache that cannot run: no cu_seqlens_q, a cu_seqlens_kv, no
// kv_lens, a cache spec that is not a row format of the prefill's d= and out=, an unusable view.
void check_cache_source(const AttentionCall& call);

struct CacheGather {
  Spec cache_spec;                 // resolved
  std::shared_ptr<Kernel> kernel;
  KvGatherParams params{};         // everything but the cache's pointers, kv_lens and the outputs
  CacheGeometry geometry;
  Dim3 grid;
  int heads_kv = 0, head_dim = 0;
  // Workspace: K at 0, V at tensor_bytes, cu_seqlens_kv (int [batch + 1]) at 2 * tensor_bytes.
  size_t tensor_bytes = 0;
  size_t bytes = 0;

  // Queues the gather of `source`'s rows into `base` (`bytes`, 256-byte aligned). Refuses (bad_input,
  // naming `what`) null or misaligned cache pointers.
  void enqueue(const KvSource& source, char* base, void* stream, const char* what) const;
  // `call` as the dense variable-length call over the rows gathered into `base`.
  AttentionCall dense_call(const AttentionCall& call, char* base) const;
};

}  // namespace qattn::rt

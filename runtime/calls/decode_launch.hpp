// What a decode call launches, decided once (Runtime::Impl::make_decode_launch): the kernels, grids and
// parameters of every part, the combine, and the workspace they need. decode() binds its own pointers
// and issues it; a decode plan (Runtime::plan_decode) keeps it and binds each run's pointers.
#pragma once
#include <cuda.h>

#include <memory>
#include <vector>

#include "qattn/abi.h"
#include "qattn/decode.hpp"
#include "qattn/spec.hpp"
#include "runtime/calls/kv_cache_view.hpp"
#include "runtime/device/module.hpp"

namespace qattn::rt {

class LoadedKernel;

// One kernel launch over one part of the cache: a row cache whole, or a flashq cache's blocks or its
// INT8 buffer. A part writes partial slots [dp.split_base, + grid_x) of dp.splits.
struct DecodePart {
  Spec spec;
  Tiling tiling;
  std::shared_ptr<LoadedKernel> kernel;
  DecodeParams dp{};   // everything but the pointers of a call (bind_decode_run) and the workspace
  int grid_x = 1;                           // split CTAs (slots) of this part
  Dim3 grid, block;
  unsigned smem_bytes = 0;
  std::shared_ptr<LoadedKernel> fallback;   // unified_max: the exact kernel for the flagged rows
  bool flashq_buffer = false;               // the INT8 buffer part of a flashq cache
};

struct DecodeLaunch {
  Spec spec;          // routed (flow resolved)
  Problem problem;
  std::vector<DecodePart> parts;
  std::shared_ptr<Kernel> combine;   // null with one slot
  DecodeCombineParams combine_params{};
  std::shared_ptr<Kernel> lse_fix;   // a K-smoothed cache (KvCacheView::k_mean): q.k_mean back into the LSE
  KvSmoothParams lse_fix_params{};
  int slots = 1;
  long long rows = 0;                // batch x heads_q x q_len
  bool unified_max = false;          // flags are zeroed and written (also when disabled: all 0)
  // Byte strides of the cache, fixed when the launch was made.
  CacheGeometry geometry;
  long long fq_page[2] = {0, 0};     // flashq blocks: K, V page strides
  long long fq_buffer_page = 0, fq_buffer_head = 0;
  int device = 0;

  size_t partial_bytes() const;      // the split partials (0 with one slot)
  size_t flag_bytes() const;         // unified_max's row flags (0 without)
};

// A workspace offset 256-byte aligned.
constexpr size_t kDecodeWorkspaceAlign = 256;
inline size_t align_workspace(size_t bytes) { return (bytes + kDecodeWorkspaceAlign - 1) / kDecodeWorkspaceAlign * kDecodeWorkspaceAlign; }

// The pointers of one call or run, from a DecodeCall (decode()) or a DecodeRun (a plan's run).
DecodeRun run_of(const DecodeCall& call);
// Writes run's pointers into every part's and the combine's parameters. Refuses (bad_input, naming
// `what`) null or misaligned pointers.
void bind_decode_run(DecodeLaunch& launch, const DecodeRun& run, const char* what);
// Queues the launch on `stream`: the flags' memset (unified_max), the parts, the exact fallbacks on the
// flagged rows, the combine, the LSE fix of a K-smoothed cache when the call returns the LSE.
// partials: partial_bytes() (null with one slot); flags: flag_bytes().
void enqueue_decode(DecodeLaunch& launch, float* partials, int* flags, CUstream stream);

}  // namespace qattn::rt

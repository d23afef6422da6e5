// qattn::Tiling — the compile-time tunables of a kernel (what the tuner chooses among).
// Text form: "bm128_bn64_w4_s2" (block of query rows, block of KV rows, warps, pipeline stages), with
// "_wg" appended when the products run on warpgroup tensor cores (wgmma, sm_90a) instead of mma.sync,
// or "_i4mma" when Q·K^T of a qk=int4 spec runs on packed int4 tensor cores (mma.sync m16n8k64 .s4,
// Q/K rows of d/2 bytes); without it a qk=int4 spec runs on int8 tensor cores over the same [-7, 7]
// codes stored one per byte (the only fast form on sm_90, where the s4 mma is emulated),
// then "_qf" when the kernel quantizes its own Q tile, "_tma" when it loads K / V^T tiles with the tensor
// memory accelerator (sm_90a wgmma form), then "_ws" when a producer warpgroup does those loads for
// consumer warpgroups (warp-specialized; needs _wg and _tma), then "_ps" when those CTAs are persistent
// (as many as the GPU holds at once, each looping over query tiles; needs _ws), then "_mb<k>" when the
// kernel asks ptxas for k resident blocks per SM (__launch_bounds__(threads, k): registers capped at
// 64K / (k * threads)),
// e.g. "bm64_bn128_w4_s3_wg_mb4" or "bm64_bn128_w4_s3_wg_qf_tma_mb4".
#pragma once
#include <string>
#include <string_view>

#include "qattn/export.h"

QATTN_PUBLIC_BEGIN
namespace qattn {

struct Tiling {
  int block_m = 128;
  int block_n = 64;
  int warps = 4;
  int stages = 2;
  bool wgmma = false;
  int min_blocks = 0;   // 0: no hint
  bool int4_mma = false;   // qk=int4: packed int4 Q/K on mma.sync .s4 (token _i4mma); never with wgmma
  // Quantized prefill: the kernel reads the fp16/bf16 Q and quantizes its own Q tile (token _qf), so
  // there is no Q quantization pass (see the notes in templates/qattn/attention/prefill_int8/fused_q.cuh).
  bool q_fused = false;
  // Quantized prefill on wgmma: one thread loads each K / V^T tile with TMA boxes completed on an
  // mbarrier (token _tma) instead of every thread's cp.async; the launch (or prepare(), once per
  // prepared call) encodes the tensor maps.
  bool tma = false;
  // Warp-specialized (token _ws, with _wg and _tma): one more warpgroup issues the TMA loads into a ring
  // of stages for the `warps` consumer warps, which take turns on the tensor cores when there are two
  // warpgroups of them; 1 block per SM with 8 warps, 2 with 4 (no _mb).
  bool warp_specialized = false;
  // Persistent (token _ps, with _ws): the launch holds as many CTAs as the SMs keep resident, and each
  // computes query tiles blockIdx.x, + gridDim.x, ... in the order of the grid it replaces; its producer
  // loads the next tile's K / V^T while the consumers finish the current one.
  bool persistent = false;
  bool operator==(const Tiling& o) const {
    return block_m == o.block_m && block_n == o.block_n && warps == o.warps && stages == o.stages &&
           wgmma == o.wgmma && min_blocks == o.min_blocks && int4_mma == o.int4_mma && q_fused == o.q_fused &&
           tma == o.tma && warp_specialized == o.warp_specialized && persistent == o.persistent;
  }
  bool operator!=(const Tiling& o) const { return !(*this == o); }
};

std::string to_string(const Tiling& t);
// Threads per CTA: warps x 32, plus the producer warpgroup of the warp-specialized form.
int block_threads(const Tiling& t);
Tiling parse_tiling(std::string_view text);   // throws qattn::Error(bad_input)

}  // namespace qattn
QATTN_PUBLIC_END

// Warp specialization on sm_90a: warpgroups with different jobs in one CTA.
//
// setmaxnreg moves registers between warpgroups at run time: a producer that only issues copies gives
// most of its registers back, and the consumers that hold the accumulators take them. Both counts are
// multiples of 8 in [24, 256]; the consumers' increase blocks until the pool of the CTA holds that many.
// Named barriers (ids 1..15; id 0 is __syncthreads) synchronise a subset of the CTA's warps, so that
// the consumers can wait for each other without the producer.
#pragma once
#include "qattn/common/types.cuh"

namespace qattn::dev {

template <int REGS>
__device__ __forceinline__ void release_registers() {
  static_assert(REGS % 8 == 0 && REGS >= 24 && REGS <= 256, "setmaxnreg takes a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

template <int REGS>
__device__ __forceinline__ void claim_registers() {
  static_assert(REGS % 8 == 0 && REGS >= 24 && REGS <= 256, "setmaxnreg takes a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

// Waits until `threads` threads (a multiple of 32) have arrived at or synced on barrier `id`.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Counts this warp towards barrier `id`'s `threads` without waiting.
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace qattn::dev

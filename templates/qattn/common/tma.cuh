// Tensor-memory-accelerator copies (cp.async.bulk.tensor, sm_90) completed on shared-memory mbarriers.
//
// One thread issues a whole tile (a box of a tensor map the host encoded with cuTensorMapEncodeTiled),
// the hardware swizzles it into shared memory and counts its bytes on an mbarrier; every consumer
// waits on that barrier's phase. Against a cp.async ring this takes the per-thread copy instructions,
// their address arithmetic and the group waits out of the loop (prefill_int8/kv_loads.cuh, TMA).
//
// Protocol per stage buffer: the issuing thread arrives with expect_tx(bytes) and issues the copies;
// the phase completes when the bytes have landed. Use n of a buffer waits on parity (n & 1).
// A buffer is refilled only after every reader is done with it (the caller's barrier), and the data
// is written by the async proxy, so wgmma (async proxy too) reads it without a proxy fence.
#pragma once
#include "qattn/common/types.cuh"

namespace qattn::dev {

__device__ __forceinline__ void mbar_init(u32 bar, u32 arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

// Makes initialised barriers visible to the async proxy (the TMA unit that completes them).
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// One arrival that also announces `bytes` of TMA data for the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// One plain arrival (release: this thread's earlier shared-memory reads are done before it counts).
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// One arrival that happens when every cp.async this thread issued so far has landed (it counts as one
// of the barrier's expected arrivals).
__device__ __forceinline__ void cp_async_mbar_arrive(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// Blocks until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  u32 done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// Box at coordinates c of the tensor map at `map` (a __grid_constant__ kernel parameter) into shared
// memory at dst, completing on bar. Coordinates are elements, innermost dimension first.
__device__ __forceinline__ void tma_load_2d(u32 dst, const void* map, u32 bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void tma_load_5d(u32 dst, const void* map, u32 bar, int c0, int c1, int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, "
      "%7}], [%2];" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

}  // namespace qattn::dev

// Asynchronous global -> shared copies (cp.async, sm_80+) and shared-memory addressing.
//
// Pipelining: every thread issues copies, then cp_async_commit() closes a "group"; cp_async_wait<N>()
// blocks until at most N of this thread's most recent groups are still in flight. Completion is per
// thread: a __syncthreads() after the wait is what makes other threads' copies visible.
#pragma once
#include "qattn/common/types.cuh"

namespace qattn::dev {

// 32-bit address in the shared window, the operand form of ldmatrix / cp.async / ld.shared.
__device__ __forceinline__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes, bypassing L1 (.cg: streamed tiles are reused through L2 / shared memory only).
// When `valid` is false nothing is read and the 16 destination bytes are zero-filled (src-size 0):
// how out-of-range rows of ragged tiles become zeros without a branch around the copy. Pass an
// in-bounds `src` (e.g. the tensor base) even then, so that compute-sanitizer stays quiet.
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

// Same, through L1 (.ca) and with 4- or 8-byte granularity for small or unaligned rows.
template <int BYTES>
__device__ __forceinline__ void cp_async_ca(u32 dst, const void* src, bool valid) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  const int src_bytes = valid ? BYTES : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(dst), "l"(src), "n"(BYTES),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  static_assert(N >= 0 && N <= 7, "cp.async.wait_group takes 0..7");
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Plain 16-byte shared/global accesses for epilogues.
__device__ __forceinline__ U32x4 ld_shared_16(u32 addr) {
  U32x4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ void st_shared_16(u32 addr, const U32x4& v) {
  asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void st_shared_4(u32 addr, u32 v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void st_global_16(void* p, const U32x4& v) {
  asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

}  // namespace qattn::dev

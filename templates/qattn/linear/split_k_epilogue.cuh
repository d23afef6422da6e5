// The output side shared by every linear kernel: fp32 sums of C[m][n] (before the int8 per-channel
// scale and the bias) go either to C, or with split-K to this split's fp32 partial, and the last CTA of
// each output tile reduces the partials.
//
// Final value: C[m][n] = round(sum * w_scale[n] (int8 only) + bias[n]), one rounding to OUT.
// Split-K protocol (abi.h, LinearParams): CTA z writes partial[z][m][n] for its tile, then
//   every thread:  __threadfence()  (its partial stores are visible device-wide before the arrival)
//   barrier, thread 0: atom.add on tile_counters[y * gridDim.x + x]; the CTA whose add returns
//   splits - 1 is the last one. It reads every split's partial of the tile (ld.global.cg: L2, where
//   the other SMs' stores are, never a stale L1 line) in the order z = 0, 1, ..., adds them in that
//   order starting from partial 0, finishes as above, and stores 0 into the counter for the next launch
//   (all splits have arrived, so nothing else touches it). The sum's bits do not depend on which CTA
//   came last.
// Tiles are (BM rows of m) x (BN columns of n) at (m0, n0); elements past M or N are never written.
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"

namespace qattn::linear {

__device__ __forceinline__ float ld_cg(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
  return v;
}

// Read-only data of the whole launch (scales, bias): the non-coherent path.
__device__ __forceinline__ float ld_nc(const float* p) {
  float v;
  asm("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ dev::u16 ld_nc(const dev::u16* p) {
  dev::u16 v;
  asm("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ void st_global_f32x2(float* p, float a, float b) {
  asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(a), "f"(b) : "memory");
}

__device__ __forceinline__ int atomic_add_acq_rel(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// The K range [k0, k_end) of this CTA's split (grid z). Without split-K the whole of K, whatever
// k_split holds.
template <int K>
__device__ __forceinline__ void split_range(const LinearParams& p, int& k0, int& k_end) {
  if (p.splits <= 1) {
    k0 = 0, k_end = K;
  } else {
    k0 = blockIdx.z * p.k_split;
    k_end = min(K, k0 + p.k_split);
  }
}

template <Fmt W, Fmt OUT, bool BIAS>
struct Epilogue {
  static_assert(OUT == Fmt::fp16 || OUT == Fmt::bf16, "linear: the output is fp16 or bf16");

  // The finished value of a full sum.
  static __device__ __forceinline__ float finish(const LinearParams& p, int n, float v) {
    if constexpr (W == Fmt::int8) v *= ld_nc(p.w_scale + n);
    if constexpr (BIAS) v += dev::to_float<OUT>(ld_nc(static_cast<const dev::u16*>(p.bias) + n));
    return v;
  }

  static __device__ __forceinline__ dev::u16* c_at(const LinearParams& p, int m, int n) {
    return static_cast<dev::u16*>(p.c) + (long long)m * p.ldc + n;
  }
  static __device__ __forceinline__ float* partial_at(const LinearParams& p, int z, int m, int n) {
    return p.partial + ((long long)z * p.m + m) * p.n + n;
  }

  // One element's sum (the CTA's split of K): to C, or to the split's partial. Skips m >= M, n >= N.
  static __device__ __forceinline__ void put(const LinearParams& p, int m, int n, float v) {
    if (m >= p.m || n >= p.n) return;
    if (p.splits <= 1) *c_at(p, m, n) = dev::from_float<OUT>(finish(p, n, v));
    else *partial_at(p, blockIdx.z, m, n) = v;
  }

  // Columns n and n + 1 of row m (n even): one 4-byte store when both exist and ldc is even.
  static __device__ __forceinline__ void put2(const LinearParams& p, int m, int n, float v0, float v1) {
    if (m >= p.m || n >= p.n) return;
    if (n + 1 < p.n && (p.ldc & 1) == 0) {
      if (p.splits <= 1) {
        *reinterpret_cast<dev::u32*>(c_at(p, m, n)) = dev::pack2<OUT>(finish(p, n, v0), finish(p, n + 1, v1));
      } else {
        float* q = partial_at(p, blockIdx.z, m, n);
        if ((p.n & 1) == 0) {
          st_global_f32x2(q, v0, v1);   // 8-byte aligned: m * N + n is even
        } else {
          q[0] = v0;
          q[1] = v1;
        }
      }
    } else {
      put(p, m, n, v0);
      put(p, m, n + 1, v1);
    }
  }

  // After every put() of the CTA (all threads call it): with split-K, the arrival and, in the last CTA
  // of the tile, the reduction of the partials of tile [m0, m0 + BM) x [n0, n0 + BN).
  template <int BM, int BN, int THREADS>
  static __device__ void reduce_splits(const LinearParams& p, int m0, int n0) {
    if (p.splits <= 1) return;
    __shared__ int last;
    __threadfence();
    __syncthreads();
    int* counter = p.tile_counters + blockIdx.y * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0) last = atomic_add_acq_rel(counter, 1) == p.splits - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int rows = min(BM, p.m - m0), cols = min(BN, p.n - n0);
    for (int i = threadIdx.x; i < rows * BN; i += THREADS) {
      const int r = i / BN, c = i % BN;
      if (c >= cols) continue;
      const int m = m0 + r, n = n0 + c;
      float v = ld_cg(partial_at(p, 0, m, n));
      for (int z = 1; z < p.splits; ++z) v += ld_cg(partial_at(p, z, m, n));
      *c_at(p, m, n) = dev::from_float<OUT>(finish(p, n, v));
    }
    if (threadIdx.x == 0) *counter = 0;
  }
};

}  // namespace qattn::linear

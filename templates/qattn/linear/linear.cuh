// The linear kernels (C = A·Wᵀ + bias, LinearParams in abi.h), one include for the rendered source:
//   Gemv<A, W, OUT, N, K, BIAS, BM, BN, WARPS, STAGES>            CUDA cores, a few tokens (gemv.cuh)
//   FlatGemm<A, W, OUT, N, K, BIAS, BM, BN, WARPS, STAGES>        mma.sync, tokens on the n8 side (flat_gemm.cuh)
//   Gemm<A, W, OUT, N, K, BIAS, BM, BN, WARPS, STAGES, WGMMA>     mma.sync tiles, many tokens (gemm.cuh), or
//                                                                 with WGMMA warpgroup tiles (sm_90a, gemm_wgmma.cuh)
// each with  static __device__ void run(const LinearParams&, char* dynamic_smem)  for WARPS * 32 threads,
// grid (ceil(N / BN), ceil(M / BM), splits) and linear_smem_bytes(...) of dynamic shared memory
// (linear_shape.h).
#pragma once
#include "qattn/linear/gemv.cuh"
#include "qattn/linear/flat_gemm.cuh"
#include "qattn/linear/gemm.cuh"

// K smoothing of a KV cache (KvSmoothParams in abi.h). A cache may store every key minus one vector per
// KV head, m[h]: each score q.k of a query then moves by the same q.m, which softmax removes, so the
// attention output is unchanged while the quantized rows no longer carry K's channel bias (SageAttention's
// K smoothing, with the vector fixed once per cache instead of per call). Two kernels:
//   Mean<IN, D>:   m[h] from the first kMeanRows tokens of an append (the one that sets it);
//   LseFix<IN, D>: the log-sum-exp a decode call returns is that of the shifted scores, so q.m (times the
//                  softmax scale) is added back.
// Both sum in a fixed order, so the same inputs give the same bits.
#pragma once
#include "qattn/abi.h"
#include "qattn/common/convert.cuh"
#include "qattn/common/math.cuh"

namespace qattn::decode::kv_smooth {

// Tokens the mean is taken over: enough for a channel's bias, and a bounded cost for a long first write.
constexpr int kMeanRows = 4096;

template <Fmt IN, int D>
struct Mean {
  static_assert(IN == Fmt::fp16 || IN == Fmt::bf16, "kv_smooth: K must be fp16 or bf16");
  static_assert(D % 32 == 0 && D <= 256, "kv_smooth: d a multiple of 32, at most 256");
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kPer = D / 32;

  // grid (heads_kv); warp w sums rows w, w + 8, ... of the first kMeanRows, then the warps' sums are
  // added in warp order.
  static __device__ void run(const KvSmoothParams& p) {
    __shared__ float part[kWarps][D];
    __shared__ int counted[kWarps];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, h = blockIdx.x;
    const long long total = static_cast<long long>(p.batch) * p.rows;
    const int rows = static_cast<int>(total < kMeanRows ? total : kMeanRows);
    float acc[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) acc[k] = 0.f;
    int n = 0;
    for (int r = warp; r < rows; r += kWarps) {
      const int b = r / p.rows, i = r % p.rows;
      if (p.slot_mapping && (p.slot_mapping[i] < 0 || p.slot_mapping[i] >= p.num_slots)) continue;
      const dev::u16* x = static_cast<const dev::u16*>(p.x.ptr) + b * p.x.sb + h * p.x.sh + i * p.x.ss + lane * kPer;
#pragma unroll
      for (int k = 0; k < kPer; ++k) acc[k] += dev::to_float<IN>(x[k]);
      ++n;
    }
#pragma unroll
    for (int k = 0; k < kPer; ++k) part[warp][lane * kPer + k] = acc[k];
    if (lane == 0) counted[warp] = n;
    __syncthreads();
    int count = 0;
    for (int w = 0; w < kWarps; ++w) count += counted[w];
    for (int c = threadIdx.x; c < D; c += kThreads) {
      float sum = 0.f;
      for (int w = 0; w < kWarps; ++w) sum += part[w][c];
      p.mean[h * D + c] = count > 0 ? sum / static_cast<float>(count) : 0.f;
    }
  }
};

template <Fmt IN, int D>
struct LseFix {
  static_assert(IN == Fmt::fp16 || IN == Fmt::bf16, "kv_smooth: Q must be fp16 or bf16");
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;

  // grid (ceil(rows / 4), heads_q, batch): one warp per query row.
  static __device__ void run(const KvSmoothParams& p) {
    const int lane = threadIdx.x % 32;
    const int i = blockIdx.x * kWarps + threadIdx.x / 32;
    const int h = blockIdx.y, b = blockIdx.z;
    if (i >= p.rows) return;
    const dev::u16* q = static_cast<const dev::u16*>(p.x.ptr) + b * p.x.sb + h * p.x.sh + i * p.x.ss;
    const float* mean = p.mean + (h / (p.heads / p.heads_kv)) * D;
    float dot = 0.f;
    for (int c = lane; c < D; c += 32) dot += dev::to_float<IN>(q[c]) * mean[c];
    for (int m = 16; m > 0; m >>= 1) dot += dev::shfl_xor(dot, m);
    if (lane == 0) p.lse[(static_cast<long long>(b) * p.heads + h) * p.rows + i] += p.softmax_scale * dot;
  }
};

}  // namespace qattn::decode::kv_smooth

// LSE correction after K smoothing (see LseCorrectionParams in abi.h):
//   RowDot<IN, D>:  dot[b, h, i] = q[b, h, i, :] · mean_k[b, h_kv, :]      one warp per query row
//   AddScaled:      lse[b, h, i] += softmax_scale * dot[b, h, i]           one thread per row
#pragma once

#include "qattn/abi.h"
#include "qattn/common/convert.cuh"

namespace qattn {
namespace lse_correction {

template <Fmt IN, int D>
struct RowDot {
  static_assert(IN == Fmt::fp16 || IN == Fmt::bf16, "lse_correction: Q must be fp16 or bf16");
  static constexpr int kThreads = 128;
  static constexpr int kRowsPerBlock = kThreads / 32;

  // grid = (ceil(q_len / kRowsPerBlock), heads_q, batch)
  static __device__ void run(const LseCorrectionParams& p) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
    const int h = blockIdx.y, b = blockIdx.z;
    if (row >= p.q_len) return;
    const int h_kv = h / (p.heads_q / p.heads_kv);
    const dev::u16* q = static_cast<const dev::u16*>(p.q.ptr) + b * p.q.sb + h * p.q.sh + row * p.q.ss;
    const float* mean = p.k_mean + (static_cast<long long>(b) * p.heads_kv + h_kv) * D;
    float acc = 0.f;
#pragma unroll
    for (int c = lane; c < D; c += 32) {
      const float x = IN == Fmt::fp16 ? dev::half_to_float(q[c]) : dev::bf16_to_float(q[c]);
      acc += x * mean[c];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) p.dot[(static_cast<long long>(b) * p.heads_q + h) * p.q_len + row] = acc;
  }
};

struct AddScaled {
  static constexpr int kThreads = 256;

  // grid = (ceil(batch * heads_q * q_len / kThreads), 1, 1)
  static __device__ void run(const LseCorrectionParams& p) {
    const long long i = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
    if (i < static_cast<long long>(p.batch) * p.heads_q * p.q_len) p.lse[i] += p.softmax_scale * p.dot[i];
  }
};

}  // namespace lse_correction
}  // namespace qattn

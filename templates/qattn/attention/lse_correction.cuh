// LSE correction after K smoothing (see LseCorrectionParams in abi.h):
//   RowDot<IN, D>:  dot[b, h, i] = q[b, h, i, :] · mean_k[b, h_kv, :]      one warp per query row
//   AddScaled:      lse[b, h, i] += softmax_scale * dot[b, h, i]           one thread per row
// Variable-length Q (cu_q != null): row i of sequence b is packed row cu_q[b] + i of q, and of lse,
// which is then [total_q, heads_q]; dot keeps its dense [b, h_q, q_len] layout (q_len: the longest
// sequence, which sizes both grids). Rows at or past a sequence's own length get dot 0 and leave lse
// alone.
#pragma once

#include "qattn/abi.h"
#include "qattn/common/convert.cuh"

namespace qattn {
namespace lse_correction {

// Query rows of sequence b: its own length with variable-length Q, else q_len.
__device__ __forceinline__ int q_rows_of(const LseCorrectionParams& p, int b) {
  return p.cu_q ? min(p.cu_q[b + 1] - p.cu_q[b], p.q_len) : p.q_len;   // cut to q_len, as the kernels
}

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
    float* dot = p.dot + (static_cast<long long>(b) * p.heads_q + h) * p.q_len + row;
    if (row >= q_rows_of(p, b)) {   // past a variable-length sequence's end
      if (lane == 0) *dot = 0.f;
      return;
    }
    const int h_kv = h / (p.heads_q / p.heads_kv);
    const long long first = p.cu_q ? (p.cu_q[b] + row) * p.q.ss : b * p.q.sb + row * p.q.ss;
    const dev::u16* q = static_cast<const dev::u16*>(p.q.ptr) + (first + h * p.q.sh);
    const float* mean = p.k_mean + (static_cast<long long>(b) * p.heads_kv + h_kv) * D;
    float acc = 0.f;
#pragma unroll
    for (int c = lane; c < D; c += 32) {
      const float x = IN == Fmt::fp16 ? dev::half_to_float(q[c]) : dev::bf16_to_float(q[c]);
      acc += x * mean[c];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) *dot = acc;
  }
};

struct AddScaled {
  static constexpr int kThreads = 256;

  // grid = (ceil(batch * heads_q * q_len / kThreads), 1, 1)
  static __device__ void run(const LseCorrectionParams& p) {
    const long long i = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
    if (i >= static_cast<long long>(p.batch) * p.heads_q * p.q_len) return;
    if (!p.cu_q) {
      p.lse[i] += p.softmax_scale * p.dot[i];
      return;
    }
    const int row = static_cast<int>(i % p.q_len);
    const long long bh = i / p.q_len;
    const int h = static_cast<int>(bh % p.heads_q), b = static_cast<int>(bh / p.heads_q);
    if (row < q_rows_of(p, b))
      p.lse[(static_cast<long long>(p.cu_q[b]) + row) * p.heads_q + h] += p.softmax_scale * p.dot[i];
  }
};

}  // namespace lse_correction
}  // namespace qattn

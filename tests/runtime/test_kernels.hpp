// Device sources shared by the runtime tests. They take qattn::AttentionParams from the embedded
// "qattn/abi.h", so a launch that reads the right values proves host and device agree on its layout.
#pragma once
#include <string>

namespace qattn::test {

// write_pattern: o[i * o.ss] = i * softmax_scale + batch * 1000 + heads_kv * 100 + kv_len, i < q_len.
// reverse_through_smem: o[i] = q[kv_len - 1 - i] * softmax_scale, staged through kv_len floats of
// dynamic shared memory (so the launch needs kv_len * 4 bytes of it).
inline std::string abi_kernels_source() {
  return R"(#include "qattn/abi.h"

extern "C" __global__ void write_pattern(qattn::AttentionParams p) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.q_len) return;
  float* out = static_cast<float*>(p.o.ptr);
  out[i * p.o.ss] = i * p.softmax_scale + p.batch * 1000.0f + p.heads_kv * 100.0f + p.kv_len;
}

extern "C" __global__ void reverse_through_smem(qattn::AttentionParams p) {
  extern __shared__ float staged[];
  const float* in = static_cast<const float*>(p.q.ptr);
  float* out = static_cast<float*>(p.o.ptr);
  for (int i = threadIdx.x; i < p.kv_len; i += blockDim.x) staged[i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < p.kv_len; i += blockDim.x)
    out[i] = staged[p.kv_len - 1 - i] * p.softmax_scale;
}
)";
}

// The value write_pattern stores at index i, in float64; tests pick operands (a power-of-two scale,
// small integers) for which every float step is exact, so the comparison can be exact.
inline double write_pattern_value(int i, double softmax_scale, int batch, int heads_kv, int kv_len) {
  return i * softmax_scale + batch * 1000.0 + heads_kv * 100.0 + kv_len;
}

}  // namespace qattn::test

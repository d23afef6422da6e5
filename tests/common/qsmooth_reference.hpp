// Float64 model of Q smoothing by block means (smooth=q; templates/qattn/quant/block_mean.cuh and
// docs/design/prefill-kernels.md, "Q smoothing"):
//   q̄_b[c]  = mean of channel c over the rows of block b (kQMeanBlock = 64 rows of (b, h), the last block
//             over its existing rows), q' = q - q̄_b(row), quantized as any Q (quantize_reference);
//   the kernel quantizes q̄_b with two int8 codes per value (MeanCodes): s = amax_c |q̄_b[c]| / 127,
//             hi = round(q̄ / s), lo = round((q̄ / s - hi) · 254), q̄ ≈ s · (hi + lo / 254);
//   scores   S = q'·k + q̄_b·k  (= q·k up to the quantization of q' and q̄_b).
#pragma once
#include <cstdint>
#include <vector>

#include "tests/common/host_tensor.hpp"

namespace qattn {
namespace test {

// The blocks of a sequence of `seq` rows, and the means: [b][h][block][c] (the layout of
// AttentionParams::q_mean).
int q_mean_blocks(int seq);
std::vector<double> q_block_means(const HostTensor& q);
HostTensor subtract_q_block_means(const HostTensor& q, const std::vector<double>& means);   // bhsd

// The kernel's two-code form of one block mean (d values).
struct MeanCodes {
  double scale = 0;            // s = amax / 127 (0 for an all-zero mean)
  std::vector<int> hi, lo;     // in [-127, 127]
  double value(int c) const { return scale * (hi[c] + lo[c] / 254.0); }
};
MeanCodes quantize_mean(const double* mean, int d);

// Q-like data where smoothing Q pays: N(0, 1), 4 channels x4, plus an offset per (b, h, 64-row block):
// 8 channels at +-U(10, 20) (the same channels and signs everywhere, sizes drawn per block) and N(0, 2)
// on every channel. (Real Q carries slowly drifting channel biases; the blocks make the drift a step.)
HostTensor q_block_offset_data(const Shape& shape, Layout layout, std::uint64_t seed);

}  // namespace test
}  // namespace qattn

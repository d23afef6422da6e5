// The share of an attention score's error that Q/K quantization alone puts there, per query row:
//   bound[b][h][i] = softmax_scale * max_j |q̂_i·(k̂_j - mean) - q_i·(k_j - mean)|   over visible keys j,
// with Q and K quantized by the float64 quantizer (K smoothed when `smooth_k`: its mean is added back
// with the exact q, as the runtime's LSE correction does). LSE is 1-Lipschitz in the largest score
// change, so no kernel given these quantized inputs can be asked to get its LSE closer than this.
// `group`: per_block tokens; per_warp / per_thread use the Q mapping for q and the K mapping for k.
// `qmax`: 127 (int8 Q/K) or 7 (int4 Q/K); `fp8`: e4m3 Q/K codes instead (qk=fp8e4m3; qmax is then 448).
// `smooth_q` (smooth=q): q̂ = Q̂' + q̄̂ with Q' = Q minus its 64-row block means (quantized as Q) and q̄̂ the
// kernel's two-code block means (qsmooth_reference.hpp).
// `k_mean_sample`: K's mean over that many sampled keys (QuantConfig::mean_sample, the runtime's
// k_mean_sample_tokens) where the runtime samples it (token-local scales); 0: over every key.
// `rotate` (rotate=hadamard): q̂ and k̂ are the rotated rows' codes (and Q's rotated block means), whose
// dot products stand for the unrotated ones.
// Exact rounding ties of Q (x / scale = n + 1/2; not looked for when rotating) add scale · |k̂_c| each:
// the fused-Q kernel may take the other code there, which is as close to x (score_error.cpp). With fp8,
// Q and K elements within fp32 rounding of a midpoint between e4m3 values add the step to the other one
// (times |k̂_c|, resp. |q̂_c|): the kernels' fp32 quotient may round either way there.
#pragma once
#include <vector>

#include "qattn/abi.h"
#include "tests/common/host_tensor.hpp"

namespace qattn {
namespace test {

std::vector<double> score_error_bound(const HostTensor& q, const HostTensor& k, Gran gran, int group, bool smooth_k,
                                      bool causal, double qmax = 127, bool smooth_q = false, int k_mean_sample = 0,
                                      bool rotate = false, bool fp8 = false);

}  // namespace test
}  // namespace qattn

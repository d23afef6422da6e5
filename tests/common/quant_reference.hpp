// Float64 mirror of the quantization kernels (templates/qattn/quant/), and a code-for-code checker of
// their outputs.
//   scale = amax / qmax over the scale group, code = clamp(round_half_even(x' / scale), -qmax, qmax),
//   x' = x - mean_c (per-channel mean over all tokens of (b, h), or over the kernels' strided sample of
//   them: QuantConfig::mean_sample) when smoothing, else x; an all-zero
//   group has scale 0 and codes 0. Dequantized: code * scale + mean_c.
//   Groups: per_tensor (whole tensor), per_block (G consecutive tokens of (b, h), the last one shorter),
//   per_token (one row), per_channel (one channel of (b, h) over all tokens; V),
//   per_warp / per_thread (SageAttention2's groups; group = 32: the Q mapping, 64: the K mapping):
//     per_warp   rows [G k, G k + G) of (b, h)
//     per_thread Q: rows {32k + g + 8i, i = 0..3} (g = 0..7); K: keys {64k + 8i + 2t, +1, i = 0..7} (t = 0..3)
//     their scales are stored expanded, one per row (the per-token layout), as the kernels write them;
//     a group cut by the sequence end takes the abs-max of its existing rows.
//   rotate (kRotateQ / kRotateK of qattn/quant/quant_config.h, token-local scales): x' is the rotated
//   x - mean_c (rotate_row_reference per row); mean_c itself is reported unrotated, as the kernels store it.
//   fp8 (QuantConfig::fp8, qmax 448; qk=fp8e4m3): the code is the e4m3 byte of x' / scale (round to
//   nearest even, saturating: qattn/decode/fp8_e4m3.h), dequantized as e4m3(code) * scale.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qattn/abi.h"
#include "tests/common/host_tensor.hpp"

namespace qattn {
namespace test {

struct QuantConfig {
  Gran gran = Gran::per_token;   // per_tensor | per_block | per_token | per_channel | per_warp | per_thread
  int group = 0;                 // per_block tokens (e.g. 64 or 128); per_warp / per_thread: 32 (Q) or 64 (K)
  double qmax = 127;             // 127: int8, 7: int4 stored in int8
  bool smooth = false;
  int mean_sample = 0;           // smoothing mean over this many tokens (the sample of quant_config.h's
                                 // sampled_token) when seq is longer; 0: every token
  int rotate = 0;                // quant::kRotateNone | kRotateQ | kRotateK (per_token, per_block,
                                 // per_warp, per_thread only)
  bool fp8 = false;              // e4m3 codes (qmax must be 448); rows only
};

struct QuantRef {
  Shape shape;
  QuantConfig config;
  std::vector<std::int8_t> codes;   // [b][h][s][c]
  std::vector<double> scales;       // compact, the layout of generator/quant_plan.hpp's dense_scale_ref:
                                    //   per_token, per_warp, per_thread [b][h][s],
                                    //   per_block [b][h][ceil(s/G)],
                                    //   per_channel [b][h][c], per_tensor [1]
  std::vector<double> mean;         // [b][h][c] when smoothing, else empty

  long long scales_per_head() const;
  long long scale_index(int b, int h, int s, int c) const;   // into `scales`
  int code(int b, int h, int s, int c) const {
    return codes[((static_cast<size_t>(b) * shape.heads + h) * shape.seq + s) * shape.dim + c];
  }
  double scale(int b, int h, int s, int c) const { return scales[scale_index(b, h, s, c)]; }
  // code * scale: the value the attention kernel multiplies (e4m3-decoded with fp8; no mean added).
  double value(int b, int h, int s, int c) const;
  double mean_at(int b, int h, int c) const {
    return mean.empty() ? 0.0 : mean[(static_cast<size_t>(b) * shape.heads + h) * shape.dim + c];
  }
  HostTensor dequantize() const;    // bhsd; with rotate: the rotated rows code * scale (no mean added)
};

QuantRef quantize_reference(const HostTensor& x, const QuantConfig& config);

// The spacing of e4m3 values at magnitude a (an e4m3 value): 2^-9 below the smallest normal 2^-6, else
// 2^(floor(log2 a) - 3).
double e4m3_step(double a);

// per_warp / per_thread: the index of token s's scale group within its head (groups numbered in the
// order of their first row); tokens of one group share it. Other granularities: -1.
int fragment_group(const QuantConfig& config, int s);

// Tokens of a head of `seq` tokens that the smoothing mean covers, in order: every token, or with
// 0 < sample < seq the quantizer's strided sample (sampled_token, qattn/quant/quant_config.h).
std::vector<int> mean_tokens(int seq, int sample);

// x' of the quantizer: x minus the per-channel `mean` ([b][h][c]; empty: none), each row then through
// rotate_row_reference when `rotate` is set. Same shape and layout as x.
HostTensor centred_rows(const HostTensor& x, const std::vector<double>& mean, int rotate);

// Per-channel mean over the mean_tokens(seq, sample) of each (b, h) (all of them by default): [b][h][c].
std::vector<double> channel_mean(const HostTensor& x, int sample = 0);
HostTensor subtract_channel_mean(const HostTensor& x, int sample = 0);

// Host copies of what a quantization kernel wrote.
struct QuantizedView {
  const std::int8_t* codes = nullptr;   // element (b, h, s, c) at codes[b*sb + h*sh + s*ss + c*sc]
  Strides strides;
  int seq_pad = 0;                      // tokens [seq_len, seq_pad) must hold code 0
  const float* scales = nullptr;        // ScaleRef addressing (per_tensor: scales[0])
  long long scale_sb = 0, scale_sh = 0;
  const float* mean = nullptr;          // [b][h][c]; required when smoothing
};

struct QuantCheck {
  long long elements = 0;
  long long differ_from_ref = 0;   // codes != the float64 reference's (each must be a rounding tie)
  long long bad_codes = 0;         // not explained by a rounding tie of the kernel's own mean/scale
  long long bad_scales = 0;
  long long bad_means = 0;
  long long bad_padding = 0;
  std::string first_problem;
  bool ok() const { return bad_codes == 0 && bad_scales == 0 && bad_means == 0 && bad_padding == 0; }
  std::string report() const;
};

// Checks a kernel's output against the reference, code for code:
//  - mean_c within 1e-5 * mean|x_c| (fp32 summation) of the float64 mean, both over the tokens the mean
//    covers (ref.config.mean_sample);
//  - scales within 1e-6 relative, plus max|mean error| / qmax when smoothing (amax moves with the mean);
//  - codes equal round_half_even((x - mean_gpu) / scale_gpu) evaluated in float64 with the kernel's own
//    mean and scale; a difference of 1 is accepted only where that quotient is within 1e-3 of a tie
//    (fp32 arithmetic), and |code| <= qmax always; codes also within 1 of the float64 reference;
//  - padded tokens hold 0.
// fp8 (e4m3) codes: the nearest value to x' / scale, or its neighbour within the kernel's fp32 error of
// their midpoint (a few ulps of the group's range of 448, d of them for rotated rows).
// `x` must be exactly the kernel's input (already rounded to fp16/bf16).
QuantCheck check_quantized(const HostTensor& x, const QuantRef& ref, const QuantizedView& got);

// Packed int4 rows (qk=int4's packed form, generator/quant_plan.hpp): codes in [-8, 7], two per byte, code 2i in
// the low nibble of byte i and 2i + 1 in the high one (two's complement). `codes` holds rows of `d`
// codes (d even); the result rows of d / 2 bytes, in the same row order. unpack_int4 is its inverse
// (sign-extending each nibble).
std::vector<std::uint8_t> pack_int4(const std::vector<std::int8_t>& codes, int d);
std::vector<std::int8_t> unpack_int4(const std::vector<std::uint8_t>& packed, int d);

}  // namespace test
}  // namespace qattn

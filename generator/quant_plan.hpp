// Launch plan of the quantization passes (host only: the generator renders one kernel per launch,
// generator/render_helpers.hpp; the device code is templates/qattn/quant/).
//
// plan_quant(request, problem) lists the kernels to launch, in order. Each is rendered as
//   extern "C" __global__ void __launch_bounds__(block) NAME(const qattn::QuantParams p) { PASS::run(p); }
// with PASS = QuantLaunch::pass, in a TU that does #include "qattn/quant/quant.cuh". All of them take
// the same QuantParams. No pass uses dynamic shared memory. Launch them in order on one stream.
// The same plan serves packed variable-length input (QuantParams::cu_seqlens): seq_len is then the
// longest sequence, and each pass reads and bounds every sequence by its own length (quant_device.cuh).
//
// Pass lists (x is read once by single-pass plans, twice otherwise, once plus S rows per head when sampled):
//   per_token | per_block | per_warp | per_thread              QuantizeRows
//   smooth or per_channel, not per_tensor, no sampled mean, when one head's tiles are at most half of
//   QuantProblem::resident_blocks (one pass, head_sync.cuh)    Quantize{Rows|Transposed}<..., OnePass>
//                                                              (zero amax_scratch[0 .. n) first)
//   per_token | per_block | per_warp | per_thread, smooth      ChannelStats<in, d, false>, FinalizeStats,
//                                                              QuantizeRows
//   the same with QuantProblem::mean_sample_tokens = S > 0 and seq_len > S (K: the mean of a strided
//   sample of S tokens, see Mean below; never one pass)        ChannelStats<in, d, false, S>,
//                                                              FinalizeStats<d, gran, true, S>, QuantizeRows
//   per_tensor                         TensorAmax (zero amax_scratch[0] first), Quantize{Rows|Transposed}
//   per_tensor, smooth                 ChannelStats<in, d, true>, FinalizeStats (zero [0] first), Quantize*
//   per_channel (rows or V^T)          ChannelStats<in, d, true>, FinalizeStats, Quantize{Rows|Transposed}
//   block_mean (Q), token-wise         QuantizeRows<..., false, true>            (one pass: means and codes)
//   block_mean (Q), per_tensor         BlockMeanAmax (zero amax_scratch[0] first), QuantizeRows<..., true>
// Grids x blocks: ChannelStats, TensorAmax (stats_splits(seq_len), heads, batch) x 256 (the sampled
//   ChannelStats: (stats_splits(S, kSampledChunkTokens), heads, batch), only the sample's chunks);
//   FinalizeStats (heads, batch, 1) x d; one pass (tiles * heads * batch, 1, 1) x 256, with at least
//   kOnePassMinBlocks blocks per SM (QuantLaunch::min_blocks, for __launch_bounds__); QuantizeRows (ceil(seq_pad / tile), heads, batch) x 256 with
//   tile = G for per_block, else kRowTileTokens (64: whole per_warp / per_thread groups); QuantizeTransposed (seq_pad / 128, heads, batch) x 256.
//
// Semantics: symmetric, scale = amax / qmax (fp32), code = clamp(round_half_even(x' / scale), -qmax, qmax)
// with x' = x - mean_c when smoothing, else x; amax = max |x'| over the scale group. An all-zero group
// gets scale 0 and codes 0. Dequantize: x ~= code * scale + mean_c. qmax = 127 (int8) or 7 (int4 kept
// in int8 storage); -qmax-1 never appears. On the GPU, x' / scale is x' * (qmax / amax) in fp32, so a
// code may differ by 1 from an exact float64 evaluation right at a rounding tie.
//
// FP8 (qk=fp8e4m3, code = fp8e4m3): the same passes and scale groups with qmax = 448; each code is the
// e4m3 byte of x' · (448 / amax) (round to nearest even, saturating) instead of an integer.
// INT4 (qk=int4): qmax = 7, the same passes. The codes go out either one per byte (int8 storage, as
// above: the int8-compute form of the attention kernel) or, with QuantRequest::pack4 (rows only),
// packed two per byte for the packed-int4 kernel (mma.sync .s4 operand layout): channel c of row s is
// the low (c even) or high (c odd) nibble of byte y[b*y.sb + h*y.sh + s*y.ss + c/2], two's complement;
// a row is d/2 bytes and y's strides count bytes. Padding rows are zero bytes.
//
// Output layouts (x, y indices are TensorRef order (b, h, s, c); strides in elements):
//   Q/K codes (transpose = false): int8 at y[b*y.sb + h*y.sh + s*y.ss + c], y.sc = 1, for s < seq_pad;
//       rows s in [seq_len, seq_pad) are 0 and have no scale (seq_pad = seq_len when no padding).
//   V codes (transpose = true): int8 V^T per head at y[b*y.sb + h*y.sh + s + c*y.sc] (y.ss = 1), for
//       s < seq_pad (a multiple of kVPadTokens); columns s >= seq_len are 0.
//   Scales: fp32, written through QuantParams::scale (ScaleRef) as abi.h describes:
//       per_token   ptr[b*sb + h*sh + s]            s < seq_len,                  group = 1
//       per_block   ptr[b*sb + h*sh + s/G]          ceil(seq_len / G) per head,   group = G
//       per_channel ptr[b*sb + h*sh + c]            d per head,                   group = 0
//       per_tensor  ptr[0]                          sb = sh = 0,                  group = 0
//       per_warp,   ptr[b*sb + h*sh + s]            s < seq_len,                  group = 1
//       per_thread  (the per_token layout: every row holds its group's scale, see below)
//     dense_scale_ref() gives the compact strides; scale_floats counts that compact buffer.
//   Mean (smooth): fp32 [batch][heads][d] contiguous at QuantParams::mean: the per-channel mean over all
//       seq_len tokens of (b, h) (for K it cancels in softmax; for V add it back to O). With a sample
//       (K, token-local scales, seq_len > S = QuantProblem::mean_sample_tokens): the mean over the S
//       tokens sampled_token(i, seq_len, S), i < S (quant_config.h: the middles of S equal strides).
//       K - c is exact for any per-channel c: q·(k - c) = q·k - q·c shifts a whole score row, which
//       softmax ignores, and the LSE correction adds back q·c with the c written here. Only per_tensor
//       (an abs-max of the smoothed tensor) and per_channel need statistics of every token.
//   Block means (block_mean): fp32 [batch][heads][ceil(seq_len / kQMeanBlock)][d] contiguous at
//       QuantParams::mean: the per-channel mean of each block of 64 rows (over its rows below seq_len);
//       x' = x - mean of the row's block (AttentionParams::q_mean; the kernel adds q̄·k back).
//   Scratch (QuantParams::amax_scratch, scratch_floats fp32, never read back by the caller; one-pass
//       plans lay it out as head_sync.cuh describes instead):
//       [0] per_tensor abs-max (zeroed before the launch whose zero_scratch_floats says so);
//       [kStatsOffset ...] per-chunk channel sum/max/min [batch][heads][stats_splits(tokens, chunk)][3][d]
//       (max/min only written when the granularity needs them; tokens: seq_len, or S when sampled).
// per_warp / per_thread groups (SageAttention2 §3.2 and its m16n8 mma fragments; the same mapping as
// reference/format_sim.hpp). Fixed by the spec, independent of the attention kernel's tiling. `group` of
// the request picks the operand's mapping: 32 = Q, 64 = K. Rows are token indices s within (b, h):
//   per_warp   Q (group 32): rows [32k, 32k + 32)          K (group 64): keys [64k, 64k + 64)
//   per_thread Q (group 32): rows {32k + g + 8i, i = 0..3}, g = 0..7 (8 groups per 32 rows: the rows
//                            of an m16 fragment that one thread holds across the warp's two m16 tiles)
//              K (group 64): keys {64k + 8i + 2t, 64k + 8i + 2t + 1, i = 0..7}, t = 0..3 (4 groups per
//                            64 keys: the score columns 2t, 2t+1 that a thread's m16n8 accumulator
//                            fragment holds in each of the block's 8 n8 tiles)
// amax is over the group's rows below seq_len (a group cut by the sequence end takes its existing rows
// only). The scale is written expanded to every row of the group in the per-token layout (group = 1),
// so the attention kernel reads it through its per-token path: exact (each row carries its group's
// scale), at per-token cost (the SageAttention2 gain of fewer scale loads is not taken).
// Alignment: x.ptr and y.ptr 16-byte aligned, x.sc = 1, x strides multiples of 8; rows: y strides
// multiples of 8; transposed: y.sb, y.sh, y.sc multiples of 16, y.sc >= seq_pad. mean 16-byte aligned.
#pragma once

#include <string>
#include <vector>

#include "qattn/abi.h"
#include "qattn/error.hpp"
#include "qattn/quant/quant_config.h"   // shared with the device passes

namespace qattn::gen {

struct QuantRequest {
  Fmt in = Fmt::fp16;           // fp16 | bf16
  Gran gran = Gran::per_token;  // rows: per_token | per_block | per_tensor | per_channel | per_warp |
                                // per_thread; transposed: per_channel | per_tensor
  int group = 0;                // per_block: 64 or 128 tokens; per_warp / per_thread: 32 (Q mapping) or
                                // 64 (K mapping), see above; ignored otherwise
  bool smooth = false;          // subtract the per-channel mean over the tokens of (b, h) (or a sample)
  bool transpose = false;       // V: write V^T per head, zero-padded to seq_pad
  int d = 128;                  // 64, 96, 128 or 256
  Fmt code = Fmt::int8;         // int8 codes, or fp8e4m3 (Q/K rows of qk=fp8e4m3, transposed per_channel V
                                // of pv=fp8e4m3: e4m3 of x' / scale, RNE, saturating; scale = amax / 448;
                                // QuantParams::qmax = 448)
  bool pack4 = false;           // rows only, codes within [-7, 7]: two codes per byte (see INT4 above)
  int qmax = 127;               // the QuantParams::qmax the caller passes: 127 (int8) or 7 (int4)
  bool block_mean = false;      // Q smoothing: subtract the mean of each block of kQMeanBlock rows
  int rotate = quant::kRotateNone;  // rows, token-local scales: the signed Hadamard rotation (quant_config.h)
                                    // after smoothing, kRotateQ (H S x) or kRotateK (H S x / B); see Rotation
};

struct QuantProblem {
  int batch = 1, heads = 1, seq_len = 1, seq_pad = 1;   // seq_pad >= seq_len
  // Blocks of a one-pass quantizer the GPU holds at once: kOnePassMinBlocks * SMs (the runtime fills it
  // in). 0: unknown, so plans keep the statistics pass (compile-only planning, tests of that form).
  int resident_blocks = 0;
  // K smoothing with token-local scales (per_token, per_block, per_warp, per_thread): the mean from a
  // strided sample of this many tokens of each head when seq_len is larger (RuntimeOptions::
  // k_mean_sample_tokens; the runtime sets it for K only). 0: every token. Other requests ignore it.
  int mean_sample_tokens = 0;
};

struct QuantLaunch {
  std::string pass;             // C++ template-id, e.g. qattn::quant::QuantizeRows<qattn::Fmt::fp16, 128, ...>
  std::string tag;              // short pass name for kernel symbols and logs, e.g. "quantize_rows"
  unsigned grid[3];
  unsigned block;               // == PASS::kThreads
  unsigned smem_bytes;          // dynamic shared memory: always 0 (static only)
  int zero_scratch_floats;      // zero amax_scratch[0 .. n) before this launch
  int min_blocks = 0;           // blocks per SM for __launch_bounds__ (one pass: kOnePassMinBlocks); 0: none
};

struct QuantPlan {
  std::vector<QuantLaunch> launches;
  long long scratch_floats = 0;   // QuantParams::amax_scratch size (0: may be null)
  long long mean_floats = 0;      // QuantParams::mean size (0: may be null)
  long long scale_floats = 0;     // compact scale buffer size (dense_scale_ref)
  int scale_group = 0;            // ScaleRef::group
};

// "" when the request and problem can be planned, else a one-line reason.
std::string quant_request_error(const QuantRequest& r, const QuantProblem& p);
// "" when the filled-in parameters meet the passes' pointer, stride and alignment needs (see the top).
std::string quant_params_error(const QuantRequest& r, const QuantParams& q);
// Tiles of one head of the quantizer that reads x (rows: per_block tiles are the group).
int quant_tiles_per_head(const QuantRequest& r, const QuantProblem& p);
// Whether K's smoothing mean comes from a strided sample (see Mean at the top).
bool quant_samples_mean(const QuantRequest& r, const QuantProblem& p);
// Whether the plan takes the one-pass form (head_sync.cuh).
bool quant_one_pass(const QuantRequest& r, const QuantProblem& p);
// Compact ScaleRef over a buffer of plan.scale_floats floats.
ScaleRef dense_scale_ref(const QuantRequest& r, const QuantProblem& p, const float* ptr);
// The passes to launch, in order; throws bad_input with quant_request_error's reason.
QuantPlan plan_quant(const QuantRequest& r, const QuantProblem& p);

}  // namespace qattn::gen

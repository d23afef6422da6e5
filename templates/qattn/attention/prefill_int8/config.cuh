// The prefill kernel's configuration: one struct whose static constexpr members name every choice.
// The generator (generator/render.cpp) writes one per kernel source, derived from DefaultConfig and
// setting the required members and every optional one that differs from its default, and
// instantiates Kernel<that struct>. A source that sets no optional member is the plain INT8 kernel.
//
// Required members:
//   Gran v_scale      V's scale granularity: per_channel or per_tensor (int8 P·V), per_channel (fp8), none (fp16)
//   Fmt  out          output type: fp16 or bf16
//   int  head_dim     64, 96, 128 or 256
//   bool causal       causal mask, aligned bottom-right (kv_len - q_len)
//   int  block_m, block_n, warps, stages   the tiling (prefill_int8_shape.h says which are valid)
//   bool wgmma        the wgmma form (sm_90a) rather than mma.sync
#pragma once

#include "qattn/abi.h"

namespace qattn {
namespace prefill_int8 {

struct DefaultConfig {
  static constexpr Fmt pv = Fmt::int8;            // P·V operands: int8 (u8 P̂), fp16 (V as given) or fp8e4m3
  static constexpr Accum accum = Accum::fp32;     // P·V accumulation: fp32, fp16 (pv=fp16) or two_level (fp8)
  static constexpr bool packed_int4 = false;      // Q·K^T on packed int4 codes, mma m16n8k64 .s4 (tiling _i4mma)
  static constexpr bool q_smooth = false;         // Q smoothing: ΔS of the block means joins the logits (smooth=q)
  static constexpr bool int4_codes = false;       // Q / K hold qk=int4 codes in [-7, 7] (raw, exactly converted S)
  static constexpr bool fp8_codes = false;        // Q / K hold e4m3 codes: e4m3 wgmma, fp32 S (qk=fp8e4m3; needs wgmma)
  static constexpr Gran fused_q = Gran::none;     // the CTA quantizes Q itself, with these scale groups (tiling _qf)
  static constexpr bool v_smooth = false;         // int8 P·V normalised by the exact row sum (smooth=v)
  static constexpr bool k_block_scale = false;    // K's scale shared by 64-key groups, folded into the row factor
  static constexpr bool tma = false;              // K / V^T tiles by tensor-map copies (tiling _tma)
  static constexpr bool warp_specialized = false; // a producer warpgroup feeds the consumers (tiling _ws; needs tma)
  static constexpr bool persistent = false;       // _ws CTAs loop over the grid's tiles (tiling _ps; needs warp_specialized)
  static constexpr bool varlen = false;           // packed sequences of their own lengths (AttentionParams::cu_q)
};

}  // namespace prefill_int8
}  // namespace qattn

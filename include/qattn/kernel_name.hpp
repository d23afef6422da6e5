// The kernel-name grammar: one string per kernel qattn renders, used as the compiled extern "C" symbol,
// the cache key, the log id, the GoogleTest parameter name and the CLI --filter. This comment is the one
// description of it. Only [A-Za-z0-9_]; the family follows "qattn_", the kernel's fields come next, and
// what varies per launch form (a tiling, a pass) follows "__".
//
// Attention kernels (a spec and a tiling; the spec tokens come from the field table, generator/spec_schema.cpp):
//   qattn_<phase>_<arch>_qk<fmt><gran>_pv<fmt><gran>_o<fmt>_d<n>[_causal][_gqa<n>][_sk<n>][_smx<mode>]
//        [_acc<mode>][_smooth<qkv>][_rothad][_paged][_gemv]__<tiling>
//   phase: prefill decode          arch: sm80 sm86 sm89 sm90 sm90a
//   fmt:   f16 bf16 i8 i4 e4m3 fq  gran: ten blk wrp thr tok chn grp hd (absent for f16 / bf16)
//   smx:   umax sas                acc:  f16 2lvl     (flow=mma and flow=auto name the same kernel)
//   tiling: bm<n>_bn<n>_w<n>_s<n>[_wg|_i4mma][_qf][_tma][_ws][_ps][_mb<n>] (its text form, include/qattn/tiling.hpp)
//   e.g. qattn_prefill_sm90a_qki8tok_pvi8chn_of16_d128_causal_gqa4_smoothk__bm128_bn64_w4_s2
// Helper kernels (launched around an attention kernel; <in> = f16 | bf16, the element type they read):
//   qattn_quant_<in>_<code><gran>[<group>][_smooth][_qmean][_rotq|_rotk][_vt]_d<n>__<pass>
//       quantization pass (generator/quant_plan.hpp); code: i8 (one code per byte, int8 and unpacked
//       int4), i4p (packed int4), e4m3; group: per_block / per_warp / per_thread tokens; _qmean: Q minus
//       its block means; _rotq / _rotk: Hadamard rotation of the Q / K side; _vt: V transposed;
//       pass: the plan's tag (quantize_rows, channel_stats_s1024, quantize_transposed_1p ...)
//   qattn_lsefix_<in>_d<n>__rowdot, qattn_lsefix__addscaled     LSE correction after K smoothing
//   qattn_combine_<in>_d<n>                                      decode: merges the split partials
//   qattn_kvappend_<fmt><gran>_<in>_d<n>[_paged]                 decode: appends tokens to the cache
//   qattn_kvgather_<fmt><gran>_<in>_d<n>[_paged]                 prefill over a cache: its rows as 16-bit
//   qattn_kvsmooth_<in>_d<n>__<mean|lsefix>                      a cache's K smoothing: the mean, decode's LSE
//   qattn_flashq_<in>_d<n>[_paged]__<stats|prefill|append>, qattn_flashq__lens   FlashQ cache writers
//   e.g. qattn_quant_f16_i8tok_smooth_d128__quantize_rows, qattn_kvappend_i4tok_bf16_d128_paged
// Bijective: parse_kernel_name(name) reads every name above back to the fields that made it, and
// rejects any other string (a name that does not print back identically is not canonical).
#pragma once
#include <string>
#include <string_view>

#include "qattn/export.h"
#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"

QATTN_PUBLIC_BEGIN
namespace qattn {

std::string kernel_name(const Spec& spec, const Tiling& tiling);   // spec.arch must be set
std::string operand_code(const Operand& op);                        // "i8tok", "i4grp", "f16" ...
std::string spec_name(const Spec& spec);                           // the part before "__"

enum class KernelFamily { attention, quant, lse_correction, decode_combine, kv_append, flashq, kv_gather, kv_smooth };

// The fields of a helper kernel's name; each family uses those its line above shows.
struct HelperKernel {
  KernelFamily family = KernelFamily::quant;
  Fmt in = Fmt::fp16;      // the element type read: fp16 | bf16
  int head_dim = 0;        // 0: one kernel for every head dim (lsefix addscaled, flashq lens)
  Operand code{};          // quant: codes (int8, int4 = packed, fp8e4m3) and scale granularity;
                           // kv_append, kv_gather: the cache's operand
  int group = 0;           // quant: per_block / per_warp / per_thread group, else 0
  bool smooth = false;     // quant: mean subtracted
  bool block_mean = false; // quant: Q block means subtracted
  int rotate = 0;          // quant: 0 none, 1 the Q side, 2 the K side (quant_config.h kRotate*)
  bool transpose = false;  // quant: V^T
  bool paged = false;      // kv_append, kv_gather, flashq
  std::string op;          // the part after "__": quant pass tag, rowdot | addscaled, flashq writer, mean | lsefix
  bool operator==(const HelperKernel& o) const;
  bool operator!=(const HelperKernel& o) const { return !(*this == o); }
};
std::string helper_kernel_name(const HelperKernel& helper);

struct ParsedKernelName {
  KernelFamily family = KernelFamily::attention;
  Spec spec;             // attention
  Tiling tiling;         // attention
  HelperKernel helper;   // every other family
};
ParsedKernelName parse_kernel_name(std::string_view name);   // throws qattn::Error(bad_input)

}  // namespace qattn
QATTN_PUBLIC_END

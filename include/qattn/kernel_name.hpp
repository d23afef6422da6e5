// The kernel-name grammar: one string per (spec, tiling), used as the compiled symbol, cache key, log id,
// GoogleTest parameter name and CLI filter. Only [A-Za-z0-9_]; spec tokens before "__", tiling after.
//   qattn_<phase>_<arch>_qk<fmt><gran>_pv<fmt><gran>_o<fmt>_d<n>[_causal][_gqa<n>][_sk<n>][_smx<mode>]
//        [_acc<mode>][_smooth<qkv>][_rothad][_paged]__bm<n>_bn<n>_w<n>_s<n>[_wg][_mb<n>]
//   fmt: f16 bf16 i8 i4 e4m3     gran: ten blk wrp thr tok chn grp (absent for f16/bf16)
//   e.g. qattn_prefill_sm90a_qki8tok_pvi8chn_of16_d128_causal_gqa4_smoothk__bm128_bn64_w4_s2
// Bijective: parse_kernel_name(kernel_name(s, t)) == {s, t} for every spec with a concrete arch.
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

struct ParsedKernelName {
  Spec spec;
  Tiling tiling;
};
ParsedKernelName parse_kernel_name(std::string_view name);   // throws qattn::Error(bad_input)

}  // namespace qattn
QATTN_PUBLIC_END

// Rendering of the helper kernels launched around an attention kernel: one CUDA translation unit each,
// named in the one kernel-name grammar (include/qattn/kernel_name.hpp). Pure host code, like render.hpp.
// Each TU is `extern "C" __global__ void __launch_bounds__(block[, min_blocks]) NAME(const PARAMS p)
// { BODY::run(p); }` over a header of templates/.
#pragma once
#include <vector>

#include "generator/quant_plan.hpp"
#include "qattn/kernel_name.hpp"
#include "generator/render.hpp"
#include "qattn/spec.hpp"

namespace qattn::gen {

// One pass of a quantization plan (quant_plan.hpp; QuantParams, launched with launch.block threads).
Source render_quant_pass(const QuantRequest& request, const QuantLaunch& launch, Arch arch);
HelperKernel quant_pass_kernel(const QuantRequest& request, const QuantLaunch& launch);

// The LSE correction after K smoothing (templates/qattn/attention/lse_correction.cuh, LseCorrectionParams):
// q · mean_k per row (128 threads), then lse += softmax_scale * dot (256 threads).
Source render_lse_rowdot(const Spec& spec);
Source render_lse_addscaled(Arch arch);

// Decode: the combine kernel (DecodeCombineParams, 4 rows per 128-thread block) and the cache-append
// kernel (KvAppendParams, 4 tokens per 128-thread block, grid (tokens/4, heads_kv, batch)).
Source render_decode_combine(const Spec& spec);
Source render_kv_append(const Spec& spec);
// Prefill over a cache: the gather of a cache's rows into a packed [rows, heads_kv, d] 16-bit tensor
// (KvGatherParams, 4 tokens per 128-thread block, grid (ceil(max_len/4), heads_kv, batch)).
Source render_kv_gather(const Spec& spec);
// A K-smoothed cache (templates/qattn/decode/kv_smooth.cuh, KvSmoothParams): op "mean" (256 threads, grid
// (heads_kv)) sets the per-head mean from an append's K; op "lsefix" (128 threads, 4 query rows each,
// grid (ceil(rows/4), heads_q, batch)) adds softmax_scale * q.mean to a decode call's LSE. spec: d= and
// out= (the 16-bit type of K and Q). Throws bad_input for another op.
Source render_kv_smooth(const Spec& spec, const std::string& op);
HelperKernel kv_smooth_kernel(const Spec& spec, const std::string& op);

// The name parts of the kernels above, for Runtime::Impl::load_helper (a loaded kernel is found by them
// without rendering its source).
HelperKernel lse_rowdot_kernel(const Spec& spec);
HelperKernel lse_addscaled_kernel();
HelperKernel decode_combine_kernel(const Spec& spec);
HelperKernel kv_row_kernel(KernelFamily family, const Spec& spec);   // kv_append | kv_gather
HelperKernel flashq_kernel(const std::string& op, const Spec& spec);   // op: stats | prefill | append | lens

// FlashQ caches (spec qk=flashq:per_channel; templates/qattn/decode/flashq_pack.cuh, FlashQPackParams,
// 128 threads): per-channel statistics and quantization of the prefill tokens (grid (ceil(n/64),
// heads_kv, 2 batch)), the decode step's flush + append (grid (heads_kv, 2, batch)) and its length
// update (grid ceil(batch/128)).
Source render_flashq_stats(const Spec& spec);
Source render_flashq_prefill(const Spec& spec);
Source render_flashq_append(const Spec& spec);
Source render_flashq_lens(const Spec& spec);
std::vector<Source> render_flashq_kernels(const Spec& spec);   // the four above

}  // namespace qattn::gen

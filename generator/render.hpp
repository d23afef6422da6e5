// Rendering: (spec, tiling) -> one CUDA translation unit for NVRTC, plus how to launch it.
// Pure host code: no CUDA calls; the TU #includes only embedded templates/ headers.
#pragma once
#include <string>
#include <vector>

#include "qattn/problem.hpp"
#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"
#include "qattn/validate.hpp"

namespace qattn {

struct Source {
  std::string kernel_name;            // also the extern "C" symbol in the TU
  std::string text;                   // the translation unit
  std::vector<std::string> options;   // extra NVRTC options beyond the compiler's defaults
  Arch arch = Arch::unset;
};

struct LaunchShape {
  unsigned grid[3] = {1, 1, 1};
  unsigned block = 128;
  unsigned smem_bytes = 0;
};

// The attention kernel of (spec, tiling). Throws bad_input when validate(spec, tiling, limits of the arch)
// fails.
Source render_attention(const Spec& spec, const Tiling& tiling);
// The grid of a prefill kernel (templates/qattn/attention/tile_order.h): the causal INT8 wgmma form's goes
// in bands of at most band_heads heads, heaviest query tiles first within a band; the other causal
// kernels' head by head, each head's heaviest tile first.
LaunchShape attention_launch(const Spec& spec, const Tiling& tiling, const Problem& problem, int band_heads = 1);
// Whether that grid fits CUDA's limits (y and z at most 65535), and if not, which size is over and what
// is accepted. The sizes every grid has (batch, heads) are validate(spec, problem)'s; what depends on
// the tiling is the causal INT8 wgmma form's, whose grid y is the query tiles (q_len / bm).
Verdict grid_fits(const Spec& spec, const Tiling& tiling, const Problem& problem);
// The band width of a causal INT8 wgmma launch (AttentionParams::band_heads): the query heads whose K and
// V together fit half of an L2 of l2_bytes, in bands of equal width; 1 where the kernel has no bands
// (non-causal, FP16/BF16, mma.sync) or l2_bytes is unknown (<= 0).
int attention_band_heads(const Spec& spec, const Tiling& tiling, const Problem& problem, long long l2_bytes);

// Decode (spec.phase == decode): render_attention() gives the split-K kernel (DecodeParams); these
// give its combine kernel (DecodeCombineParams, 4 rows per 128-thread block) and the cache-append
// kernel (KvAppendParams, 4 tokens per 128-thread block, grid (tokens/4, heads_kv, batch)).
LaunchShape decode_launch(const Spec& spec, const Tiling& tiling, const Problem& problem, int splits);
Source render_decode_combine(const Spec& spec);
Source render_kv_append(const Spec& spec);

// FlashQ caches (spec qk=flashq:per_channel; templates/qattn/decode/flashq_pack.cuh, FlashQPackParams,
// 128 threads): per-channel statistics and quantization of the prefill tokens (grid (ceil(n/64),
// heads_kv, 2 batch)), the decode step's flush + append (grid (heads_kv, 2, batch)) and its length
// update (grid ceil(batch/128)). Names qattn_flashq_<op>_<in>_d<n>[_paged], qattn_flashq_lens.
Source render_flashq_stats(const Spec& spec);
Source render_flashq_prefill(const Spec& spec);
Source render_flashq_append(const Spec& spec);
Source render_flashq_lens(const Spec& spec);
std::vector<Source> render_flashq_kernels(const Spec& spec);   // the four above

// A helper kernel (quantization pass, LSE correction): `body` names a type with
// `static __device__ void run(const <params_type>&)`, declared in `header`. min_blocks > 0: the second
// __launch_bounds__ argument (blocks per SM the registers must allow).
Source render_helper(const std::string& kernel_name, const std::string& header, const std::string& body,
                     const std::string& params_type, unsigned block, Arch arch, unsigned min_blocks = 0);

}  // namespace qattn

// Rendering: (spec, tiling) -> one CUDA translation unit for NVRTC, plus how to launch it.
// Pure host code: no CUDA calls; the TU #includes only embedded templates/ headers.
#pragma once
#include <string>
#include <vector>

#include "qattn/problem.hpp"
#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"
#include "qattn/validate.hpp"

namespace qattn::gen {

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

// The kernel of (spec, tiling): attention (AttentionParams, or DecodeParams for decode) or a linear layer
// (LinearParams). Throws bad_input when validate(spec, tiling, limits of the arch) fails.
Source render_kernel(const Spec& spec, const Tiling& tiling);
// The grid of a linear kernel over m tokens: (N tiles, M tiles, splits), warps x 32 threads.
LaunchShape linear_launch(const Spec& spec, const Tiling& tiling, int m, int splits);
// The grid of a prefill kernel (templates/qattn/attention/tile_order.h): the causal INT8 wgmma form's goes
// in bands of at most band_heads heads, heaviest query tiles first within a band; the other causal
// kernels' head by head, each head's heaviest tile first.
// A persistent tiling (_ps) launches min(ctas, tiles) CTAs in x (every tile when ctas is 0), which loop over
// the tiles of the grid it replaces.
LaunchShape attention_launch(const Spec& spec, const Tiling& tiling, const Problem& problem, int band_heads = 1,
                             int ctas = 0);
// The most query tiles a persistent launch loops over: its int unit index plus one stride stays an int.
constexpr long long kMaxPersistentUnits = 1LL << 30;
// Whether that grid fits CUDA's limits (y and z at most 65535), and if not, which size is over and what
// is accepted. The sizes every grid has (batch, heads) are validate(spec, problem)'s; what depends on
// the tiling is the causal INT8 wgmma form's, whose grid y is the query tiles (q_len / bm).
Verdict grid_fits(const Spec& spec, const Tiling& tiling, const Problem& problem);
// The band width of a causal INT8 wgmma launch (AttentionParams::band_heads): the query heads whose K and
// V together fit half of an L2 of l2_bytes, in bands of equal width; 1 where the kernel has no bands
// (non-causal, FP16/BF16, mma.sync) or l2_bytes is unknown (<= 0).
int attention_band_heads(const Spec& spec, const Tiling& tiling, const Problem& problem, long long l2_bytes);

// Decode (spec.phase == decode): render_kernel() gives the split-K kernel (DecodeParams).
LaunchShape decode_launch(const Spec& spec, const Tiling& tiling, const Problem& problem, int splits);

// The helper kernels (quantization passes, LSE correction, decode's combine and cache writers) are
// rendered by generator/render_helpers.hpp.

}  // namespace qattn::gen

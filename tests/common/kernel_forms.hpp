// The kernel forms a quantized prefill spec is checked in on this GPU: what attention() runs (its default
// tiling, in the fused-Q form _qf and the TMA form _tma where rt::ExperimentOptions::fuse_q_quant / tma_loads
// apply them), the default tiling as it is where that differs (Q from the quantization pass, cp.async
// loads; AttentionTma checks _tma without _qf), and where the default is the wgmma form
// (sm_90a), also its warp-specialized forms (_ws: one and two consumer warpgroups, the latter also
// persistent, _ps) and the first mma.sync
// candidate (what every other arch runs), so every code path meets the same floors on the H100.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "generator/search_space.hpp"
#include "qattn/validate.hpp"

namespace qattn::test {

// nullopt = attention() with the default tiling; a tiling = prepare_with() that tiling.
inline std::vector<std::optional<Tiling>> forms_to_check(const Spec& spec) {
  std::vector<std::optional<Tiling>> forms = {std::nullopt};
  const Tiling plain = default_tiling(spec, default_limits(spec.arch));
  if (spec.quantized() && tma_form(spec, fused_q_form(spec, plain, default_limits(spec.arch)), default_limits(spec.arch)) != plain)
    forms.push_back(plain);
  // The warp-specialized form of the default shape, its two-consumer (ping-pong) form, and that one's
  // persistent launch.
  if (plain.wgmma)
    for (int warps : {plain.warps, 8, -8}) {
      Tiling ws{16 * std::abs(warps), plain.block_n, std::abs(warps), plain.stages, true};
      ws.tma = true;
      ws.warp_specialized = true;
      ws.persistent = warps < 0;
      if (validate(spec, ws, default_limits(spec.arch)) &&
          std::find(forms.begin(), forms.end(), std::optional<Tiling>(ws)) == forms.end())
        forms.push_back(ws);
    }
  if (plain.wgmma)
    for (const Tiling& t : gen::candidate_tilings(spec, default_limits(spec.arch)))
      if (!t.wgmma) {
        forms.push_back(t);
        break;
      }
  return forms;
}

inline std::string form_name(const std::optional<Tiling>& form) { return form ? to_string(*form) : "default"; }

}  // namespace qattn::test

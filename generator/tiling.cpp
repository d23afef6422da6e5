#include "qattn/tiling.hpp"

#include "generator/text.hpp"
#include "qattn/attention/prefill_int8_shape.h"
#include "qattn/error.hpp"

namespace qattn {

std::string to_string(const Tiling& t) {
  return "bm" + std::to_string(t.block_m) + "_bn" + std::to_string(t.block_n) + "_w" + std::to_string(t.warps) +
         "_s" + std::to_string(t.stages) + (t.wgmma ? "_wg" : "") + (t.int4_mma ? "_i4mma" : "") +
         (t.q_fused ? "_qf" : "") + (t.tma ? "_tma" : "") + (t.warp_specialized ? "_ws" : "") +
         (t.persistent ? "_ps" : "") + (t.min_blocks > 0 ? "_mb" + std::to_string(t.min_blocks) : "");
}

Tiling parse_tiling(std::string_view input) {
  auto parts = gen::text::split(input, "_");
  // The optional tokens, from the back: _mb<k>, then _ps, then _ws, then _tma, then _qf, then one of _wg / _i4mma.
  long long min_blocks = 0;
  bool ok = true;
  if (parts.size() > 4 && gen::text::starts_with(parts.back(), "mb")) {
    ok = gen::text::parse_int(std::string_view(parts.back()).substr(2), min_blocks) && min_blocks > 0 && min_blocks <= 32;
    parts.pop_back();
  }
  const bool ps = parts.size() > 4 && parts.back() == "ps";
  if (ps) parts.pop_back();
  const bool ws = parts.size() > 4 && parts.back() == "ws";
  if (ws) parts.pop_back();
  const bool tma = parts.size() > 4 && parts.back() == "tma";
  if (tma) parts.pop_back();
  const bool q_fused = parts.size() > 4 && parts.back() == "qf";
  if (q_fused) parts.pop_back();
  const bool wgmma = parts.size() == 5 && parts[4] == "wg";
  const bool int4_mma = parts.size() == 5 && parts[4] == "i4mma";
  if (wgmma || int4_mma) parts.pop_back();
  const char* prefixes[] = {"bm", "bn", "w", "s"};
  long long values[4] = {0, 0, 0, 0};
  ok = ok && parts.size() == 4;
  for (size_t i = 0; ok && i < 4; ++i)
    ok = gen::text::starts_with(parts[i], prefixes[i]) &&
         gen::text::parse_int(std::string_view(parts[i]).substr(std::string_view(prefixes[i]).size()), values[i]) &&
         values[i] > 0 && values[i] <= 1024;
  if (!ok)
    throw_bad_input("bad tiling '" + std::string(input) +
                    "'; expected bm<rows>_bn<rows>_w<warps>_s<stages>[_wg|_i4mma][_qf][_tma][_ws][_ps][_mb<blocks>], e.g. "
                    "bm128_bn64_w4_s2, bm64_bn128_w4_s3_wg_qf_tma_mb4, bm128_bn128_w8_s2_wg_tma_ws_ps or bm64_bn64_w4_s2_i4mma");
  return Tiling{static_cast<int>(values[0]), static_cast<int>(values[1]), static_cast<int>(values[2]),
                static_cast<int>(values[3]), wgmma, static_cast<int>(min_blocks), int4_mma, q_fused, tma, ws, ps};
}

int block_threads(const Tiling& t) {
  return t.warp_specialized ? prefill_int8::ws_threads(t.warps) : t.warps * 32;
}

}  // namespace qattn

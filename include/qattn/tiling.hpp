// qattn::Tiling — the compile-time tunables of a kernel (what the tuner chooses among).
// Text form: "bm128_bn64_w4_s2" (block of query rows, block of KV rows, warps, pipeline stages), with
// "_wg" appended when the products run on warpgroup tensor cores (wgmma, sm_90a) instead of mma.sync.
#pragma once
#include <string>
#include <string_view>

namespace qattn {

struct Tiling {
  int block_m = 128;
  int block_n = 64;
  int warps = 4;
  int stages = 2;
  bool wgmma = false;
  bool operator==(const Tiling& o) const {
    return block_m == o.block_m && block_n == o.block_n && warps == o.warps && stages == o.stages &&
           wgmma == o.wgmma;
  }
  bool operator!=(const Tiling& o) const { return !(*this == o); }
};

std::string to_string(const Tiling& t);
Tiling parse_tiling(std::string_view text);   // throws qattn::Error(bad_input)

}  // namespace qattn

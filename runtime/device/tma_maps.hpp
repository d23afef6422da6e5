// The tensor maps of a _tma prefill kernel (templates/qattn/attention/prefill_int8.cuh, TMA): which
// boxes of K and V^T it loads, as plain data (tested on CPU), and their encoding by the driver.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "qattn/abi.h"
#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"

namespace qattn::rt {

// One cuTensorMapEncodeTiled call: an int8 (uint8) tensor of `rank` dimensions, innermost first.
struct TmaMapPlan {
  const void* base = nullptr;
  int rank = 0;
  std::array<std::uint64_t, 5> dims{};
  std::array<std::uint64_t, 4> strides{};   // bytes, of dims 1 .. rank - 1
  std::array<std::uint32_t, 5> box{};
  int swizzle_bytes = 0;                     // 64 or 128: the kernel's XOR swizzle of its tile rows
};

struct TmaPlans {
  TmaMapPlan k, v;
};

// The maps for the K and V^T of `p`, or the reason (one line, with what is accepted) why the _tma kernel
// of (spec, tiling) cannot read them:
//  K: int8 rows (sc = 1, ss a multiple of 16 bytes), each (batch, head) starting at a multiple of 16 rows
//     and holding its keys rounded up to 16 rows (the runtime's workspace pads them). Rank 5: (d bytes,
//     key bit 0, key bits 2-3, key bit 1, key / 16), so that a box of bn keys lands in the kernel's
//     permuted key order (k_smem_row).
//  V^T: rows of tokens (ss = 1, sc a multiple of 16 bytes), each (batch, head) a whole number of rows.
//     Rank 2: (tokens up to kv_len, rows); tokens past kv_len come in as zeros.
TmaPlans plan_tma_maps(const Spec& spec, const Tiling& tiling, const AttentionParams& p, std::string* why);

// The kernel parameter of a _tma kernel: `p` and its two encoded maps. Throws Error(bad_input) with
// plan_tma_maps' reason, or DriverError when the driver lacks or refuses cuTensorMapEncodeTiled.
TmaAttentionParams tma_params(const Spec& spec, const Tiling& tiling, const AttentionParams& p);

}  // namespace qattn::rt

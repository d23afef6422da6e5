// Which query tile of which head a prefill CTA computes: the grid of the prefill kernels, and with it the
// schedule of the causal ones. Plain C++, shared by the host (attention_launch, tests) and the device code
// (prefill_int8.cuh, prefill_fp16.cuh), so the two sides cannot disagree.
//
// The hardware hands CTAs out in linear block order (x fastest), so the grid's layout is the schedule.
//   in_order        non-causal: every CTA carries the same work. Grid (query tiles, heads_q, batch).
//   by_head         causal, the FP16/BF16 kernel and the INT8 kernel's mma.sync form: the same grid,
//                   each head's tiles last first (the last query tile of a head sees every key, the first
//                   one tile).
//   banded          causal, the INT8 kernel's wgmma form (sm_90a): longest processing time first over many
//                   heads, so that only light CTAs are left for the tail. Over all heads at once that
//                   would run every head's long tiles together, and their K/V need not fit in L2 (d 64, 4k
//                   keys, 128 heads of int8 K and V: 64 MB; the H100's L2 is 50 MB; then no faster than
//                   head by head). So the heads go in bands whose K/V fit a share of L2 (band_heads, from
//                   the host: attention_band_heads in render.hpp), and within a band the tiles go
//                   heaviest first, the heads varying fastest (docs/design/prefill-kernels.md).
//                   Grid (band width, query tiles, bands): CTA (x, y, z) computes query tile
//                   (tiles - 1 - y) of head bh = x + width * z, bh = batch * heads_q + h. Bands have equal
//                   widths; the last band may hold fewer than `bands` CTAs per tile past the last head,
//                   which exit at once.
// A persistent launch keeps the order of the grid it replaces (unit_slot below).
// A grid dimension per quantity, not a division of a linear index: the query tile is then a function of
// blockIdx alone, which the compiler re-reads inside the main loop instead of holding it (and the mask
// rows derived from it) in registers; the d 64 INT8 kernels run at their 128-register cap, and a division
// there spilled 8 bytes. The FP16 kernel and the INT8 mma.sync form stay by_head: near 255 registers,
// deriving head and batch by division spilled (FP16: 8-112 bytes at d 64-128 on sm_80 and sm_90a; INT8
// mma.sync: 4 and 24 bytes at d 64 Q smoothing and d 256 fp8 P·V on sm_89; ptxas, CUDA 13.0), and
// the banded order is tuned for the wgmma form (sm_90a) only.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define QATTN_TILE_ORDER_FN __host__ __device__ constexpr
#else
#define QATTN_TILE_ORDER_FN constexpr
#endif

namespace qattn {
namespace tile_order {

enum class Order : int { in_order, by_head, banded };

struct Grid {
  unsigned x, y, z;
};

struct Slot {
  int q_tile, h, b;   // b >= batch: a CTA past the last head of the last band
};

// CUDA's limit on a grid's y and z (x goes to 2^31 - 1).
constexpr unsigned kMaxGridYz = 65535;

// The width of the bands for at most band_heads heads per band, bh_count = batch * heads_q heads in all:
// as many bands as that takes, all of the same width. The bands (grid z) stay within kMaxGridYz: past
// that, a band takes more heads than asked.
QATTN_TILE_ORDER_FN int band_width(int bh_count, int band_heads) {
  const int fewest = static_cast<int>((static_cast<long long>(bh_count) + kMaxGridYz - 1) / kMaxGridYz);
  const int asked = band_heads < fewest ? fewest : band_heads;
  const int most = asked < 1 ? 1 : asked > bh_count ? bh_count : asked;
  const int bands = (bh_count + most - 1) / most;
  return (bh_count + bands - 1) / bands;
}

QATTN_TILE_ORDER_FN Grid grid(Order order, int q_tiles, int heads_q, int batch, int band_heads) {
  if (order != Order::banded)
    return Grid{static_cast<unsigned>(q_tiles), static_cast<unsigned>(heads_q), static_cast<unsigned>(batch)};
  const int width = band_width(batch * heads_q, band_heads);
  return Grid{static_cast<unsigned>(width), static_cast<unsigned>(q_tiles),
              static_cast<unsigned>((batch * heads_q + width - 1) / width)};
}

// The slot of CTA (x, y, z) in a grid of (nx, ny, nz) made by grid(order, ...).
QATTN_TILE_ORDER_FN Slot slot(Order order, unsigned x, unsigned y, unsigned z, unsigned nx, unsigned ny, int heads_q) {
  if (order == Order::in_order) return Slot{static_cast<int>(x), static_cast<int>(y), static_cast<int>(z)};
  if (order == Order::by_head) return Slot{static_cast<int>(nx - 1 - x), static_cast<int>(y), static_cast<int>(z)};
  const int bh = static_cast<int>(x + nx * z);
  return Slot{static_cast<int>(ny - 1 - y), bh % heads_q, bh / heads_q};
}

// A persistent launch (the warp-specialized form's _ps) runs grid(...)'s CTAs as work units on fewer
// CTAs: unit w is the CTA at linear block index w of that grid (x fastest), so the units keep its
// schedule, and a persistent CTA takes units blockIdx.x, blockIdx.x + gridDim.x, ... The host keeps the
// count within an int (grid_fits).
QATTN_TILE_ORDER_FN long long unit_count(Grid g) {
  return static_cast<long long>(g.x) * static_cast<long long>(g.y) * static_cast<long long>(g.z);
}

QATTN_TILE_ORDER_FN Slot unit_slot(Order order, int w, Grid g, int heads_q) {
  const unsigned u = static_cast<unsigned>(w), yz = u / g.x;
  return slot(order, u - yz * g.x, yz % g.y, yz / g.y, g.x, g.y, heads_q);
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
// This CTA's slot, from blockIdx: the compiler knows it is constant and re-reads it where a value
// derived from it (the query tile, the mask rows) would otherwise hold a register.
template <Order ORDER>
__device__ __forceinline__ Slot this_cta(int heads_q) {
  return slot(ORDER, blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, heads_q);
}

// The same slot for the epilogue, from volatile reads of the block index: the compiler then derives
// head and batch (divisions, when banded) again instead of holding the prologue's in registers through
// the main loop.
template <Order ORDER>
__device__ __forceinline__ Slot this_cta_again(int heads_q) {
  unsigned x, y, z, nx, ny;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(x));
  asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(y));
  asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(z));
  asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(nx));
  asm volatile("mov.u32 %0, %%nctaid.y;" : "=r"(ny));
  return slot(ORDER, x, y, z, nx, ny, heads_q);
}
#endif

}  // namespace tile_order
}  // namespace qattn

#undef QATTN_TILE_ORDER_FN

// The prefill grid and causal schedule (templates/qattn/attention/tile_order.h), and the band width the
// host picks for it.
#include <gtest/gtest.h>

#include <set>
#include <tuple>
#include <vector>

#include "qattn/attention/tile_order.h"
#include "generator/render.hpp"
#include "generator/search_space.hpp"
#include "qattn/spec.hpp"

namespace qattn {
namespace {

namespace to = tile_order;

// The slots in launch order (x fastest, then y, then z), CTAs past the last head left out.
std::vector<to::Slot> schedule(to::Order order, int q_tiles, int heads_q, int batch, int band) {
  const to::Grid g = to::grid(order, q_tiles, heads_q, batch, band);
  std::vector<to::Slot> seq;
  for (unsigned z = 0; z < g.z; ++z)
    for (unsigned y = 0; y < g.y; ++y)
      for (unsigned x = 0; x < g.x; ++x) {
        const to::Slot s = to::slot(order, x, y, z, g.x, g.y, heads_q);
        if (s.b < batch) seq.push_back(s);
      }
  return seq;
}

// Every (query tile, head, batch) is computed by exactly one CTA, whatever the band, including a last
// band with CTAs past the last head; those are fewer than the bands.
TEST(TileOrder, EveryTileOnceForAnyBand) {
  for (to::Order order : {to::Order::in_order, to::Order::by_head, to::Order::banded})
    for (int q_tiles : {1, 2, 7, 64})
      for (int heads : {1, 3, 8})
        for (int batch : {1, 2, 5})
          for (int band : {0, 1, 2, 5, 8, 13, 40}) {
            std::set<std::tuple<int, int, int>> seen;
            for (const to::Slot& s : schedule(order, q_tiles, heads, batch, band)) {
              ASSERT_GE(s.q_tile, 0);
              ASSERT_LT(s.q_tile, q_tiles);
              ASSERT_GE(s.h, 0);
              ASSERT_LT(s.h, heads);
              ASSERT_GE(s.b, 0);
              seen.insert({s.q_tile, s.h, s.b});
            }
            EXPECT_EQ(seen.size(), static_cast<size_t>(q_tiles * heads * batch))
                << q_tiles << " tiles, " << heads << " heads, batch " << batch << ", band " << band;
            const to::Grid g = to::grid(order, q_tiles, heads, batch, band);
            const long long ctas = 1LL * g.x * g.y * g.z, bands = order == to::Order::banded ? g.z : 1;
            EXPECT_LT(ctas - q_tiles * heads * batch, bands * q_tiles);
          }
}

// by_head, and banded with bands of one head: head by head, each head's last tile first.
TEST(TileOrder, ByHeadAndBandOneGoHeadByHeadLastTileFirst) {
  for (to::Order order : {to::Order::by_head, to::Order::banded}) {
    const std::vector<to::Slot> seq = schedule(order, 5, 3, 2, 1);
    ASSERT_EQ(seq.size(), 30u);
    for (int i = 0; i < 30; ++i) {
      EXPECT_EQ(seq[i].b * 3 + seq[i].h, i / 5);
      EXPECT_EQ(seq[i].q_tile, 4 - i % 5);
    }
  }
}

// Within a band the work never grows along the launch order (heaviest first), the heads of a band vary
// fastest, and no CTA of a band is handed out before every CTA of the band before it.
TEST(TileOrder, BandsGoHeaviestFirstWithHeadsFastest) {
  const int q_tiles = 6, heads = 5, batch = 2, band = 4;   // 10 heads: bands of 4, 4 and 2 (+2 that exit)
  const std::vector<to::Slot> order = schedule(to::Order::banded, q_tiles, heads, batch, band);
  ASSERT_EQ(order.size(), 60u);
  auto bh = [&](const to::Slot& s) { return s.b * heads + s.h; };
  int last_band = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const int b = bh(order[i]) / band;
    EXPECT_GE(b, last_band) << "CTA " << i;
    if (i > 0 && b == bh(order[i - 1]) / band) {
      EXPECT_LE(order[i].q_tile, order[i - 1].q_tile) << "CTA " << i;
    }
    last_band = b;
  }
  EXPECT_EQ(order[0].q_tile, 5);
  EXPECT_EQ(bh(order[0]), 0);
  EXPECT_EQ(bh(order[1]), 1);   // the next head's heaviest tile, not this head's next one
  EXPECT_EQ(order[4].q_tile, 4);
  EXPECT_EQ(bh(order[48]), 8);  // the last band has two heads
  EXPECT_EQ(bh(order[49]), 9);
  EXPECT_EQ(order[49].q_tile, 5);
  EXPECT_EQ(order[59].q_tile, 0);
}

const Tiling kWg{64, 128, 4, 3, true};   // the wgmma form

TEST(TileOrder, BandHoldsTheHeadsWhoseKvFitsHalfOfL2) {
  const Spec int8 = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 causal smooth=kv arch=sm_90a");
  // d 64, 4k keys: 512 KiB of int8 K and V per head, 25 MB of a 50 MB L2 -> 47 heads, so 128 heads go
  // as three bands of 43.
  EXPECT_EQ(gen::attention_band_heads(int8, kWg, Problem{4, 32, 32, 4096, 4096}, 50'000'000), 43);
  // GQA 4: a band of KV heads serves four times as many query heads.
  EXPECT_EQ(gen::attention_band_heads(int8, kWg, Problem{4, 32, 8, 4096, 4096}, 50'000'000), 128);
  // FP8 P·V reads V as one byte too; the mma.sync form has no bands.
  const Spec fp8 = parse_spec("prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=64 causal smooth=k arch=sm_90a");
  EXPECT_EQ(gen::attention_band_heads(fp8, kWg, Problem{4, 32, 32, 4096, 4096}, 50'000'000), 43);
  EXPECT_EQ(gen::attention_band_heads(int8, Tiling{64, 128, 4, 2}, Problem{4, 32, 32, 4096, 4096}, 50'000'000), 1);
  // A head larger than half of L2 still makes a band of one.
  EXPECT_EQ(gen::attention_band_heads(int8, kWg, Problem{1, 32, 32, 1 << 20, 1 << 20}, 50'000'000), 1);
}

// Non-causal grids need no order, the FP16 kernel and the mma.sync forms keep by_head (tile_order.h says
// why), and without the L2 size there is nothing to size a band by.
TEST(TileOrder, BandIsOneWithoutBandsOrL2Size) {
  const Spec causal = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 causal smooth=kv arch=sm_90a");
  const Spec full = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 smooth=kv arch=sm_90a");
  EXPECT_EQ(gen::attention_band_heads(full, kWg, Problem{4, 32, 32, 4096, 4096}, 50'000'000), 1);
  EXPECT_EQ(gen::attention_band_heads(causal, kWg, Problem{4, 32, 32, 4096, 4096}, 0), 1);
  EXPECT_EQ(gen::attention_band_heads(causal, kWg, Problem{1, 1, 1, 4096, 4096}, 50'000'000), 1);
  const Spec fp16 = parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=64 causal arch=sm_90a");
  EXPECT_EQ(gen::attention_band_heads(fp16, Tiling{128, 128, 4, 1}, Problem{4, 32, 32, 4096, 4096}, 50'000'000), 1);
}

// CUDA caps grid y and z at 65535. Bands widen rather than pass it in z (here 200000 heads, bands of one
// asked), and the slots stay one CTA per tile.
TEST(TileOrder, BandsStayWithinTheGridLimit) {
  const int heads = 40000, batch = 5;
  for (int band : {1, 2, 7}) {
    const to::Grid g = to::grid(to::Order::banded, 2, heads, batch, band);
    EXPECT_LE(g.z, to::kMaxGridYz) << "band " << band;
    std::set<std::tuple<int, int, int>> seen;
    for (const to::Slot& s : schedule(to::Order::banded, 2, heads, batch, band)) seen.insert({s.q_tile, s.h, s.b});
    EXPECT_EQ(seen.size(), static_cast<size_t>(2 * heads * batch)) << "band " << band;
  }
  EXPECT_EQ(to::band_width(1000, 4), 4);   // under the limit a band is what was asked
}

// The causal wgmma grid puts the query tiles in y: past 65535 of them grid_fits says so and names the
// longest q the tiling takes, and launchable_tiling picks a candidate whose grid fits (a larger bm, or
// the mma.sync form, whose query tiles are in x). Non-causal grids have them in x too.
TEST(TileOrder, CausalWgmmaPastTheGridLimitRunsAnotherTiling) {
  const Spec causal = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 causal smooth=kv arch=sm_90a");
  const Spec full = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 smooth=kv arch=sm_90a");
  const DeviceLimits limits = default_limits(Arch::sm_90a);
  const int at_limit = 65535 * 64;
  const Problem fits{1, 2, 2, at_limit, at_limit}, over{1, 2, 2, at_limit + 1, at_limit + 1};
  EXPECT_TRUE(gen::grid_fits(causal, kWg, fits).ok);
  const Verdict v = gen::grid_fits(causal, kWg, over);
  ASSERT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("(1, 65536, 2)"), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("q <= 4194240"), std::string::npos) << v.reason;
  EXPECT_TRUE(gen::grid_fits(full, kWg, over).ok);
  EXPECT_EQ(gen::launchable_tiling(causal, fits, kWg, limits), kWg);
  // Just past bm 64's limit a bm 128 wgmma candidate still fits; past its limit too, mma.sync.
  const Tiling other = gen::launchable_tiling(causal, over, kWg, limits);
  EXPECT_NE(other, kWg);
  EXPECT_TRUE(validate(causal, other, limits).ok);
  EXPECT_TRUE(gen::grid_fits(causal, other, over).ok);
  const Problem far{1, 2, 2, 65535 * 128 + 1, 65535 * 128 + 1};
  const Tiling sync = gen::launchable_tiling(causal, far, kWg, limits);
  EXPECT_FALSE(sync.wgmma);
  EXPECT_TRUE(gen::grid_fits(causal, sync, far).ok);
}

// A persistent launch (_ps): unit w is the CTA at linear block index w of the grid it replaces, so the
// CTAs' units in stride order cover every tile once, in the replaced grid's order; the launch is
// min(ctas, units) CTAs in x, all of them when the host does not know its SMs.
TEST(TileOrder, PersistentUnitsAreTheReplacedGridInLaunchOrder) {
  for (to::Order order : {to::Order::in_order, to::Order::banded})
    for (int q_tiles : {1, 7, 64})
      for (int heads : {1, 3, 8})
        for (int batch : {1, 5})
          for (int band : {1, 2, 5, 40}) {
            const to::Grid g = to::grid(order, q_tiles, heads, batch, band);
            const long long units = to::unit_count(g);
            ASSERT_EQ(units, 1LL * g.x * g.y * g.z);
            std::vector<to::Slot> by_unit;
            for (int w = 0; w < units; ++w) {
              const to::Slot s = to::unit_slot(order, w, g, heads);
              if (s.b < batch) by_unit.push_back(s);
            }
            const std::vector<to::Slot> launch = schedule(order, q_tiles, heads, batch, band);
            ASSERT_EQ(by_unit.size(), launch.size());
            for (size_t i = 0; i < launch.size(); ++i) {
              EXPECT_EQ(by_unit[i].q_tile, launch[i].q_tile) << i;
              EXPECT_EQ(by_unit[i].h, launch[i].h) << i;
              EXPECT_EQ(by_unit[i].b, launch[i].b) << i;
            }
            // 132 persistent CTAs, each striding by the grid: every unit exactly once.
            std::vector<int> taken(static_cast<size_t>(units), 0);
            for (int cta = 0; cta < 132; ++cta)
              for (long long w = cta; w < units; w += 132) ++taken[static_cast<size_t>(w)];
            for (long long w = 0; w < units; ++w) EXPECT_EQ(taken[static_cast<size_t>(w)], 1) << w;
          }
  const Spec causal = parse_spec("prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=128 causal arch=sm_90a");
  Tiling ps{128, 128, 8, 2, true};
  ps.tma = ps.warp_specialized = ps.persistent = true;
  const Problem p{2, 32, 8, 4096, 4096};   // 32 query tiles x 64 heads: 2048 units
  const gen::LaunchShape l = gen::attention_launch(causal, ps, p, 16, 132);
  EXPECT_EQ(l.grid[0], 132u);
  EXPECT_EQ(l.grid[1], 1u);
  EXPECT_EQ(l.grid[2], 1u);
  EXPECT_EQ(gen::attention_launch(causal, ps, p, 16, 0).grid[0], 2048u);
  EXPECT_EQ(gen::attention_launch(causal, ps, Problem{1, 1, 1, 100, 100}, 1, 132).grid[0], 1u);
  EXPECT_TRUE(gen::grid_fits(causal, ps, p).ok);
  // Past 2^30 query tiles the unit index could overflow: refused, with the way out.
  const Verdict v = gen::grid_fits(causal, ps, Problem{1 << 12, 1 << 12, 1 << 12, 128 * 65, 128 * 65});
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("drop _ps"), std::string::npos) << v.reason;
}

}  // namespace
}  // namespace qattn

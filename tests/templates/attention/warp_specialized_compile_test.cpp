// The warp-specialized form (tiling token _ws: a producer warpgroup loads K / V^T / K-scale tiles by TMA
// into a ring of stages on mbarriers, one or two consumer warpgroups compute) and its persistent launch
// (_ps: as many CTAs as the SMs hold, each looping over query tiles) on the CPU: the grammar,
// the kernel source and launch shape, what validate() refuses and why, the tuner's candidates, and an
// NVRTC compile of every format at d 64 and 128 for sm_90a without spill stores or a serialized wgmma
// pipeline.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "generator/render.hpp"
#include "generator/search_space.hpp"
#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/runtime.hpp"
#include "qattn/validate.hpp"
#include "tests/common/compile_all.hpp"

namespace qattn {
namespace {

const DeviceLimits kHopper = default_limits(Arch::sm_90a);

Tiling ws_tiling(int bm, int bn, int warps, int stages, bool persistent = false) {
  Tiling t{bm, bn, warps, stages, true};
  t.tma = true;
  t.warp_specialized = true;
  t.persistent = persistent;
  return t;
}

TEST(WarpSpecialized, OneTokenOfTheGrammarTheSourceAndTheLaunch) {
  const Tiling t = ws_tiling(128, 128, 8, 3);
  EXPECT_EQ(to_string(t), "bm128_bn128_w8_s3_wg_tma_ws");
  EXPECT_EQ(parse_tiling("bm128_bn128_w8_s3_wg_tma_ws"), t);
  for (const char* bad : {"bm128_bn128_w8_s3_wg_ws_tma", "bm128_bn128_w8_s3_ws_wg", "bm128_bn128_w8_s3_wg_tma_mb1_ws"})
    EXPECT_THROW(parse_tiling(bad), Error) << bad;
  const Spec s = parse_spec("prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=bf16 d=128 causal gqa=4 arch=sm_90a");
  ASSERT_TRUE(validate(s, t, kHopper)) << validate(s, t, kHopper).reason;
  EXPECT_EQ(parse_kernel_name(kernel_name(s, t)).tiling, t);
  // The producer warpgroup is 128 threads more; 8 consumer warps run one block per SM (4 warps: two),
  // which the launch bounds say so that ptxas and setmaxnreg agree on the registers.
  const gen::Source src = gen::render_kernel(s, t);
  EXPECT_NE(src.text.find("__launch_bounds__(384, 1)"), std::string::npos) << src.text;
  EXPECT_NE(src.text.find("::run_ws(p, qattn_smem)"), std::string::npos) << src.text;
  EXPECT_NE(src.text.find("static constexpr bool warp_specialized = true;"), std::string::npos) << src.text;
  EXPECT_NE(src.text.find("const __grid_constant__ qattn::TmaAttentionParams p"), std::string::npos);
  const Tiling w4 = ws_tiling(64, 128, 4, 2);
  EXPECT_NE(gen::render_kernel(s, w4).text.find("__launch_bounds__(256, 2)"), std::string::npos);
  EXPECT_EQ(block_threads(t), 384);
  EXPECT_EQ(block_threads(w4), 256);
  EXPECT_EQ(gen::attention_launch(s, t, Problem{2, 32, 8, 1000, 1000}).block, 384u);
  // A second mbarrier per stage (the stage is free again).
  Tiling tma_only = t;
  tma_only.warp_specialized = false;
  EXPECT_EQ(kernel_smem_bytes(s, t), kernel_smem_bytes(s, tma_only) + 8 * 3);
}

TEST(WarpSpecialized, PersistentIsOneMoreTokenAndALaunchOfResidentCtas) {
  const Tiling t = ws_tiling(128, 128, 8, 2, true);
  EXPECT_EQ(to_string(t), "bm128_bn128_w8_s2_wg_tma_ws_ps");
  EXPECT_EQ(parse_tiling("bm128_bn128_w8_s2_wg_tma_ws_ps"), t);
  for (const char* bad : {"bm128_bn128_w8_s2_wg_tma_ps_ws", "bm128_bn128_w8_s2_wg_ps_tma_ws", "bm128_bn128_w8_s2_wg_tma_ws_ps_ps"})
    EXPECT_THROW(parse_tiling(bad), Error) << bad;
  const Spec s = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 causal gqa=2 smooth=kv arch=sm_90a");
  ASSERT_TRUE(validate(s, t, kHopper)) << validate(s, t, kHopper).reason;
  EXPECT_EQ(parse_kernel_name(kernel_name(s, t)).tiling, t);
  EXPECT_NE(kernel_name(s, t), kernel_name(s, ws_tiling(128, 128, 8, 2)));
  const gen::Source src = gen::render_kernel(s, t);
  EXPECT_NE(src.text.find("static constexpr bool persistent = true;"), std::string::npos) << src.text;
  EXPECT_NE(src.text.find("::run_ws(p, qattn_smem)"), std::string::npos) << src.text;
  EXPECT_EQ(gen::render_kernel(s, ws_tiling(128, 128, 8, 2)).text.find("persistent"), std::string::npos);
  // Same shared memory and threads as the form it loops: the ring runs on across tiles.
  EXPECT_EQ(kernel_smem_bytes(s, t), kernel_smem_bytes(s, ws_tiling(128, 128, 8, 2)));
  EXPECT_EQ(block_threads(t), 384);
  // 132 SMs x 1 block (8 consumer warps) for 4 x 16 heads x 8 query tiles; fewer tiles than that: one each.
  EXPECT_EQ(gen::attention_launch(s, t, Problem{4, 16, 8, 1024, 1024}, 1, 132).grid[0], 132u);
  EXPECT_EQ(gen::attention_launch(s, t, Problem{1, 2, 1, 1024, 1024}, 1, 132).grid[0], 16u);
  // Without _ws there is no persistent form; what validate() says names the way out.
  Tiling plain{128, 128, 8, 2, true};
  plain.tma = true;
  plain.persistent = true;
  const Verdict v = validate(s, plain, kHopper);
  EXPECT_FALSE(v);
  EXPECT_NE(v.reason.find("needs _ws"), std::string::npos) << v.reason;
  const Spec linear = parse_spec("linear a=fp16 w=int8:per_channel out=fp16 n=4096 k=4096 flow=gemv arch=sm_90a");
  Tiling lin{8, 64, 4, 2};
  lin.persistent = true;
  EXPECT_NE(validate(linear, lin, kHopper).reason.find("_ps"), std::string::npos);
}

TEST(WarpSpecialized, RefusedWhereItCannotRunWithTheWayOut) {
  const Spec s = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 arch=sm_90a");
  const auto reason = [&](const Spec& spec, const Tiling& t) {
    const Verdict v = validate(spec, t, kHopper);
    EXPECT_FALSE(v) << to_string(t);
    return v.reason;
  };
  Tiling no_tma = ws_tiling(128, 128, 8, 2);
  no_tma.tma = false;
  EXPECT_NE(reason(s, no_tma).find("needs _wg and _tma"), std::string::npos);
  Tiling fused = ws_tiling(128, 128, 8, 2);
  fused.q_fused = true;
  EXPECT_NE(reason(s, fused).find("pre-quantized Q; drop _qf"), std::string::npos);
  Tiling mb = ws_tiling(64, 128, 4, 2);
  mb.min_blocks = 3;
  EXPECT_NE(reason(s, mb).find("fixes its blocks per SM"), std::string::npos);
  const Spec d96 = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=96 arch=sm_90a");
  EXPECT_NE(reason(d96, ws_tiling(128, 128, 8, 2)).find("accepted: d=64, d=128"), std::string::npos);
  const Spec fp16_pv = parse_spec("prefill qk=int8:per_token pv=fp16 out=fp16 d=128 arch=sm_90a");
  EXPECT_NE(reason(fp16_pv, ws_tiling(128, 128, 8, 2)).find("pv=fp16 uses the mma.sync form"), std::string::npos);
  // Two blocks of 4 consumer warps must fit the SM's shared memory: d 128 with 4 stages of bn 128 does not.
  EXPECT_NE(reason(s, ws_tiling(64, 128, 4, 4)).find("blocks per SM"), std::string::npos);
  // What attention() applies never turns a _ws tiling into a fused-Q one.
  EXPECT_EQ(fused_q_form(s, ws_tiling(128, 128, 8, 2), kHopper), ws_tiling(128, 128, 8, 2));
}

TEST(WarpSpecialized, TheTunerTimesItBesideTheOtherForms) {
  const auto count_ws = [](const Spec& s) {
    int n = 0, persistent = 0;
    for (const Tiling& t : gen::candidate_tilings(s, default_limits(s.arch))) {
      n += t.warp_specialized;
      persistent += t.persistent;
    }
    if (n > 0) {   // the persistent launch of the one-consumer form is a candidate too
      EXPECT_GE(persistent, 2) << to_string(s);
      EXPECT_LT(persistent, n) << to_string(s);
    } else {
      EXPECT_EQ(persistent, 0) << to_string(s);
    }
    return n;
  };
  EXPECT_GE(count_ws(parse_spec("prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 arch=sm_90a")), 4);
  EXPECT_GE(count_ws(parse_spec("prefill qk=int4:per_thread pv=int8:per_channel out=fp16 d=64 causal arch=sm_90a")), 4);
  EXPECT_EQ(count_ws(parse_spec("prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 arch=sm_89")), 0);
  EXPECT_EQ(count_ws(parse_spec("prefill qk=int8:per_warp pv=int8:per_channel out=fp16 d=256 arch=sm_90a")), 0);
}

// Every Q/K granularity x P·V format x d 64 / 128 (two-level fp8 accumulation: d 64), causal and not,
// with one and two consumer warpgroups: each compiles for sm_90a with no spill stores and its wgmma
// pipeline intact.
// QATTN_TEST_LEVEL 1 (CI) compiles one (causal, tiling) corner per format and head dim, in turn, so each
// format meets both tilings and both masks; 2 compiles all four corners.
TEST(WarpSpecializedCompile, EveryFormatCompilesWithoutSpillsOrSerialization) {
  const bool every_corner = test::test_level() >= 2;
  std::vector<std::pair<Spec, Tiling>> work;
  int turn = 0;
  for (const char* qk : {"int8:per_token", "int8:per_warp", "int8:per_block", "int8:per_thread", "int4:per_thread",
                         "fp8e4m3:per_block"})
    for (int d : {64, 128})
      for (const char* pv : {"pv=int8:per_channel", "pv=fp8e4m3:per_channel", "pv=fp8e4m3:per_channel accum=two_level"})
        for (bool causal : {false, true}) {
          const std::string text = std::string("prefill qk=") + qk + " " + pv + " out=" + (causal ? "bf16" : "fp16") +
                                   " d=" + std::to_string(d) + (causal ? " causal gqa=2" : "") + " smooth=kv arch=sm_90a";
          const Spec s = parse_spec(text);
          for (const Tiling& t : {ws_tiling(128, 128, 8, 2), ws_tiling(64, 128, 4, 2)}) {
            // corner % 4 = 2 causal + tiling; format combination corner / 4 compiles its corner (corner / 4) % 4.
            const int corner = turn++;
            if (!every_corner && corner % 4 != (corner / 4) % 4) continue;
            if (s.accum == Accum::two_level && d == 128) {   // refused: it would spill
              EXPECT_NE(validate(s, t, kHopper).reason.find("runs at d=64 only"), std::string::npos) << text;
              continue;
            }
            ASSERT_TRUE(validate(s, t, kHopper)) << text << " " << to_string(t);
            work.emplace_back(s, t);
          }
        }
  test::expect_compiled_with_wgmma_pipeline(work);
  std::printf("[ compiled ] %zu _ws kernels for sm_90a\n", work.size());
}

// The persistent form over every Q/K granularity x d 64 / 128, causal and not, each P·V format on
// alternate points, one and two consumer warpgroups: no spill stores (its producer keeps 24 registers
// for the tile loop), the wgmma pipeline intact.
TEST(WarpSpecializedCompile, PersistentFormCompilesWithoutSpillsOrSerialization) {
  std::vector<std::pair<Spec, Tiling>> work;
  int turn = 0;
  for (const char* qk : {"int8:per_token", "int8:per_warp", "int8:per_block", "int8:per_thread", "int4:per_thread",
                         "fp8e4m3:per_block", "fp8e4m3:per_token"})
    for (int d : {64, 128})
      for (bool causal : {false, true}) {
        const char* pv = turn++ % 2 ? "pv=int8:per_channel" : "pv=fp8e4m3:per_channel";
        const std::string text = std::string("prefill qk=") + qk + " " + pv + " out=" + (causal ? "bf16" : "fp16") +
                                 " d=" + std::to_string(d) + (causal ? " causal gqa=4" : "") + " smooth=kv arch=sm_90a";
        const Spec s = parse_spec(text);
        const Tiling t = turn % 4 < 2 ? ws_tiling(128, 128, 8, 2, true) : ws_tiling(64, 128, 4, 2, true);
        ASSERT_TRUE(validate(s, t, kHopper)) << text << " " << to_string(t);
        work.emplace_back(s, t);
      }
  test::expect_compiled_with_wgmma_pipeline(work);
  std::printf("[ compiled ] %zu _ws_ps kernels for sm_90a\n", work.size());
}

}  // namespace
}  // namespace qattn

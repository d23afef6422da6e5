// qk=fp8e4m3 (e4m3 Q/K codes, the input format of FlashAttention-3's and cuDNN's FP8 attention) on the
// CPU: the kernel source and its quantization passes, and an NVRTC compile for sm_90a of every
// granularity x P·V format x head dim, default tiling and warp-specialized form, without spill stores or
// a serialized wgmma pipeline.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "generator/render.hpp"
#include "generator/search_space.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/runtime.hpp"
#include "qattn/validate.hpp"
#include "runtime/calls/helper_kernels.hpp"
#include "tests/common/compile_all.hpp"

namespace qattn {
namespace {

const DeviceLimits kHopper = default_limits(Arch::sm_90a);

// The kernel reads e4m3 Q / K (the config says so, the name carries the format), and its Q and K passes
// write e4m3 codes with the same scale groups as int8 (V's pass is the P·V format's).
TEST(Fp8Qk, TheKernelAndItsQuantizationPasses) {
  const Spec s = parse_spec("prefill qk=fp8e4m3:per_block pv=fp8e4m3:per_channel out=bf16 d=128 causal smooth=k arch=sm_90a");
  const Tiling t = default_tiling(s, kHopper);
  const gen::Source src = gen::render_kernel(s, t);
  EXPECT_NE(src.text.find("static constexpr bool fp8_codes = true;"), std::string::npos) << src.text;
  EXPECT_EQ(src.kernel_name.rfind("qattn_prefill_sm90a_qke4m3blk_pve4m3chn_obf16_d128_causal_smooth", 0), 0u) << src.kernel_name;
  EXPECT_EQ(parse_kernel_name(src.kernel_name).spec, s);
  const Spec int8 = parse_spec("prefill qk=int8:per_block pv=fp8e4m3:per_channel out=bf16 d=128 causal smooth=k arch=sm_90a");
  EXPECT_EQ(gen::render_kernel(int8, t).text.find("fp8_codes"), std::string::npos);

  const auto slots = rt::quant_slots(s, Problem{1, 8, 8, 1000, 1000}, false, 0, 0, false, false);
  for (int i : {0, 1}) {
    SCOPED_TRACE(i);
    EXPECT_EQ(slots[static_cast<size_t>(i)].request.code, Fmt::fp8e4m3);
    EXPECT_EQ(slots[static_cast<size_t>(i)].request.gran, Gran::per_block);
    EXPECT_NE(slots[static_cast<size_t>(i)].plan.launches.back().pass.find("qattn::Fmt::fp8e4m3>"), std::string::npos)
        << slots[static_cast<size_t>(i)].plan.launches.back().pass;
  }
  EXPECT_EQ(slots[2].request.code, Fmt::fp8e4m3);   // V: pv=fp8e4m3
  EXPECT_EQ(rt::quant_slots(int8, Problem{1, 8, 8, 1000, 1000}, false, 0, 0, false, false)[0].request.code, Fmt::int8);
}

// Every granularity x P·V format x head dim (causal on every other point), the default tiling and, at d 64
// / 128, both warp-specialized forms; and the fused-Q / TMA twin attention() launches (below).
TEST(Fp8QkCompile, EveryFormatCompilesWithoutSpillsOrSerialization) {
  std::vector<std::pair<Spec, Tiling>> work, twins;
  int turn = 0;
  for (const char* qk : {"fp8e4m3:per_token", "fp8e4m3:per_block", "fp8e4m3:per_warp", "fp8e4m3:per_tensor"})
    for (const char* pv : {"pv=fp8e4m3:per_channel", "pv=int8:per_channel"})
      for (int d : {64, 128, 256}) {
        const bool causal = turn++ % 2 == 1;
        const std::string text = std::string("prefill qk=") + qk + " " + pv + " out=" + (causal ? "bf16" : "fp16") +
                                 " d=" + std::to_string(d) + (causal ? " causal gqa=2" : "") + " smooth=k arch=sm_90a";
        const Spec s = parse_spec(text);
        const Tiling plain = default_tiling(s, kHopper);
        ASSERT_TRUE(plain.wgmma) << text;
        work.emplace_back(s, plain);
        const Tiling launched = tma_form(s, fused_q_form(s, plain, kHopper), kHopper);
        EXPECT_EQ(launched.q_fused, std::string(qk) != "fp8e4m3:per_tensor") << text;   // e4m3 Q in the prologue
        if (launched != plain) twins.emplace_back(s, launched);
        if (d > 128 || std::string(qk) != "fp8e4m3:per_token") continue;   // _ws: d 64 / 128; one granularity
        for (int w : {8, 4}) {
          Tiling ws{16 * w, 128, w, 2, true};
          ws.tma = ws.warp_specialized = true;
          ASSERT_TRUE(validate(s, ws, kHopper)) << text << " " << to_string(ws);
          work.emplace_back(s, ws);
        }
      }
  test::expect_compiled_with_wgmma_pipeline(work);
  // The twins (fused Q, TMA): no spills. At d 64 with int8 P·V and causal masks ptxas serializes their wgmma pipeline
  // at the 128-register cap (mb4), as it does for the qk=int8 twin of the same point; reported, not failed.
  const size_t twins_compiled = test::expect_compiled_without_spills(twins);
  std::printf("[ compiled ] %zu qk=fp8e4m3 kernels for sm_90a (and %zu fused-Q / TMA twins)\n", work.size(), twins_compiled);
}

}  // namespace
}  // namespace qattn

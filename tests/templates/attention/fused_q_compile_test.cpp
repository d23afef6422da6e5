// The fused-Q form (tiling token _qf: the attention kernel quantizes its own Q tile) on the CPU:
// which specs get it (fused_q_form, what attention() launches), and an NVRTC compile of the _qf twin of
// the default tiling for every token-local Q granularity x head dim x P·V format, for sm_80, sm_89 and
// sm_90a, within the register file and without ptxas spill stores.
#include <gtest/gtest.h>

#include <cstdio>

#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "generator/render.hpp"
#include "qattn/runtime.hpp"
#include "generator/search_space.hpp"
#include "qattn/validate.hpp"
#include "tests/common/compile_all.hpp"

namespace qattn {
namespace {

TEST(FusedQ, FormAppliesToTokenLocalPlainInt8QOnly) {
  const DeviceLimits lim = default_limits(Arch::sm_90a);
  auto form_of = [&](const char* text) {
    const Spec s = parse_spec(text);
    return fused_q_form(s, default_tiling(s, lim), lim);
  };
  for (const char* yes : {"prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal smooth=kv arch=sm_90a",
                          "prefill qk=int8:per_token pv=int8:per_channel out=bf16 d=96 arch=sm_90a",
                          "prefill qk=int8:per_block pv=fp16 out=fp16 d=256 smooth=k arch=sm_90a",
                          "prefill qk=int4:per_thread pv=int8:per_channel out=fp16 d=64 smooth=kv arch=sm_90a"}) {
    const Tiling t = form_of(yes);
    EXPECT_TRUE(t.q_fused) << yes;
    EXPECT_NE(to_string(t).find("_qf"), std::string::npos);
  }
  for (const char* no : {"prefill qk=int8:per_tensor pv=int8:per_channel out=fp16 d=128 arch=sm_90a",
                         "prefill qk=int8:per_warp pv=int8:per_channel out=fp16 d=128 smooth=qk arch=sm_90a",
                         "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 smooth=kv rotate=hadamard arch=sm_90a",
                         "prefill qk=fp16 pv=fp16 out=fp16 d=128 arch=sm_90a"})
    EXPECT_FALSE(form_of(no).q_fused) << no;
  // Packed int4 (_i4mma, sm_89's default for qk=int4) keeps its Q pass.
  const Spec i4 = parse_spec("prefill qk=int4:per_thread pv=fp8e4m3:per_channel out=fp16 d=128 smooth=kv arch=sm_89");
  const Tiling packed = default_tiling(i4, default_limits(Arch::sm_89));
  ASSERT_TRUE(packed.int4_mma);
  EXPECT_EQ(fused_q_form(i4, packed, default_limits(Arch::sm_89)), packed);
  // Asked for explicitly where it does not apply: refused, with the reason and the way out.
  const Spec per_tensor = parse_spec("prefill qk=int8:per_tensor pv=int8:per_channel out=fp16 d=128 arch=sm_90a");
  Tiling t = default_tiling(per_tensor, lim);
  t.q_fused = true;
  const Verdict v = validate(per_tensor, t, lim);
  EXPECT_FALSE(v);
  EXPECT_NE(v.reason.find("accepted with _qf: per_block, per_warp, per_thread, per_token"), std::string::npos) << v.reason;
  const Spec qs = parse_spec("prefill qk=int8:per_warp pv=int8:per_channel out=fp16 d=128 smooth=qk arch=sm_80");
  t = default_tiling(qs, default_limits(Arch::sm_80));
  t.q_fused = true;
  EXPECT_NE(validate(qs, t, default_limits(Arch::sm_80)).reason.find("drop _qf"), std::string::npos);
  // One token of the tiling grammar, after _wg / _i4mma and before _mb, and part of the kernel name.
  const Tiling wg{64, 128, 4, 3, true, 4, false, true};
  EXPECT_EQ(to_string(wg), "bm64_bn128_w4_s3_wg_qf_mb4");
  EXPECT_EQ(parse_tiling("bm64_bn128_w4_s3_wg_qf_mb4"), wg);
  EXPECT_EQ(parse_tiling("bm128_bn64_w8_s2_qf"), (Tiling{128, 64, 8, 2, false, 0, false, true}));
  for (const char* bad : {"bm64_bn128_w4_s3_qf_wg", "bm64_bn128_w4_s3_mb4_qf", "bm64_bn128_w4_qf"})
    EXPECT_THROW(parse_tiling(bad), Error) << bad;
  const Spec s = parse_spec("prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal smooth=kv arch=sm_90a");
  EXPECT_EQ(parse_kernel_name(kernel_name(s, wg)).tiling, wg);
  // fused_q carries Q's granularity (v_smooth stays unset for fp8 P·V, k_block_scale is set for
  // per_warp K in the wgmma form); the fused tile adds 8 bytes per Q row.
  const gen::Source src = gen::render_kernel(s, Tiling{64, 128, 4, 2, true, 0, false, true});
  EXPECT_NE(src.text.find("  static constexpr qattn::Gran fused_q = qattn::Gran::per_warp;\n"
                          "  static constexpr bool k_block_scale = true;\n};"),
            std::string::npos)
      << src.text;
  EXPECT_EQ(kernel_smem_bytes(s, Tiling{64, 128, 4, 2, true, 0, false, true}),
            kernel_smem_bytes(s, Tiling{64, 128, 4, 2, true}) + 8 * 64);
}

// Every token-local granularity x head dim x P·V format of the arch, the default tiling's _qf twin.
class FusedQCompile : public ::testing::TestWithParam<Arch> {};

TEST_P(FusedQCompile, TwinsOfTheDefaultTilingsCompileWithoutSpills) {
  const Arch arch = GetParam();
  const DeviceLimits lim = default_limits(arch);
  std::vector<std::pair<Spec, Tiling>> work;
  const char* pvs[] = {"pv=int8:per_channel", arch == Arch::sm_80 ? "pv=fp16" : "pv=fp8e4m3:per_channel"};
  for (const char* gran : {"per_token", "per_warp", "per_thread", "per_block"})
    for (int d : {64, 96, 128, 256})
      for (const char* pv : pvs) {
        const std::string text = std::string("prefill qk=int8:") + gran + " " + pv + " out=" + (d == 96 ? "bf16" : "fp16") +
                                 " d=" + std::to_string(d) + (d == 128 ? " causal" : "") +
                                 (std::string(pv) == "pv=fp16" ? " smooth=k" : " smooth=kv") + " arch=" + to_string(arch);
        const Spec s = parse_spec(text);
        const Tiling t = fused_q_form(s, default_tiling(s, lim), lim);
        ASSERT_TRUE(t.q_fused) << text;
        work.emplace_back(s, t);
      }
  std::printf("[ compiled ] %zu fused-Q kernels for %s\n", test::expect_compiled_without_spills(work), to_string(arch));
}

INSTANTIATE_TEST_SUITE_P(Archs, FusedQCompile, ::testing::Values(Arch::sm_80, Arch::sm_89, Arch::sm_90a),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace qattn

// Variable-length prefill (spec token varlen) on the CPU: the grammar and kernel name, what validate()
// refuses, the sources (a varlen kernel is its own; the equal-length kernels' sources, and so their cache
// keys, are untouched), the call's refusals before any GPU work, and an NVRTC compile without spills of
// the default tilings of every prefill family for sm_80, sm_89 and sm_90a, plus the TMA, fused-Q and
// warp-specialized forms on sm_90a.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "generator/render.hpp"
#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/runtime.hpp"
#include "qattn/validate.hpp"
#include "tests/common/compile_all.hpp"

namespace qattn {
namespace {

TEST(Varlen, OneTokenOfTheSpecAndTheKernelName) {
  const std::string text = "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 varlen arch=sm_90a";
  const Spec s = parse_spec(text);
  EXPECT_TRUE(s.varlen);
  EXPECT_EQ(to_string(s), text);
  Spec dense = s;
  dense.varlen = false;
  EXPECT_NE(s, dense);
  const Tiling t = default_tiling(s, default_limits(s.arch));
  const std::string name = kernel_name(s, t);
  EXPECT_NE(name.find("_varlen_"), std::string::npos) << name;
  EXPECT_EQ(kernel_name(dense, t).find("varlen"), std::string::npos);
  EXPECT_EQ(parse_kernel_name(name).spec, s);
}

TEST(Varlen, DecodeRefusesItAndSaysWhatItTakes) {
  const Verdict v = validate(parse_spec("decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 varlen arch=sm_90a"));
  EXPECT_FALSE(v);
  EXPECT_NE(v.reason.find("varlen applies to prefill"), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("kv_lens"), std::string::npos) << v.reason;
}

TEST(Varlen, ItsOwnSourceWhileTheEqualLengthSourcesStayAsTheyWere) {
  const Spec q8 = parse_spec("prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=bf16 d=128 causal varlen arch=sm_90a");
  const Spec f16 = parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=64 causal varlen arch=sm_80");
  for (const Spec& s : {q8, f16}) {
    Spec dense = s;
    dense.varlen = false;
    const Tiling t = default_tiling(dense, default_limits(s.arch));
    const std::string v = gen::render_kernel(s, t).text;
    const std::string d = gen::render_kernel(dense, t).text;
    EXPECT_NE(v, d);
    // The dense source names no varlen at all (its text, and so its binary-cache key, is what it was).
    EXPECT_EQ(d.find("varlen"), std::string::npos) << d;
    if (s.quantized()) EXPECT_NE(v.find("static constexpr bool varlen = true;"), std::string::npos) << v;
    else EXPECT_NE(v.find(", true>::run(p, qattn_smem)"), std::string::npos) << v;
  }
}

// Refused before anything is launched or compiled, so no GPU is needed to see them.
TEST(Varlen, CallsWithHalfTheOffsetsOrNoneAreRefused) {
  RuntimeOptions o;
  o.use_cache = false;
  Runtime runtime(o);
  int fake[2] = {0, 0};
  char data[64];
  AttentionCall c;
  c.spec = parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=64 arch=sm_80");
  c.q = c.k = c.v = c.o = packed(data, 1, 64);
  c.cu_seqlens_q = fake;   // without cu_seqlens_kv
  try {
    runtime.attention(c, nullptr);
    ADD_FAILURE() << "accepted a call with only cu_seqlens_q";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input);
    EXPECT_NE(std::string(e.what()).find("needs both cu_seqlens_q and cu_seqlens_kv"), std::string::npos) << e.what();
  }
  c.cu_seqlens_q = nullptr;
  c.spec.varlen = true;   // a varlen spec without offsets
  try {
    runtime.attention(c, nullptr);
    ADD_FAILURE() << "accepted a varlen spec without offsets";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input);
    EXPECT_NE(std::string(e.what()).find("pass cu_seqlens_q and cu_seqlens_kv"), std::string::npos) << e.what();
  }
  // check() and benchmark() draw equal lengths: they take the equal-length spec.
  try {
    runtime.check(c.spec, Problem{1, 1, 1, 64, 64}, 1);
    ADD_FAILURE() << "check() accepted a varlen spec";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("drop varlen"), std::string::npos) << e.what();
  }
}

TEST(VarlenCompile, EveryFamilyCompilesWithoutSpills) {
  const char* specs[] = {
      "prefill qk=fp16 pv=fp16 out=fp16 d=128 causal",
      "prefill qk=bf16 pv=bf16 out=bf16 d=64",
      "prefill qk=fp16 pv=fp16 out=fp16 d=256 causal",
      "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal smooth=kv",
      "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=bf16 d=128 causal",
      "prefill qk=int8:per_thread pv=fp16 out=fp16 d=64 causal",
      "prefill qk=int8:per_block pv=int8:per_channel out=fp16 d=96 causal",
      "prefill qk=int4:per_token pv=int8:per_channel out=fp16 d=128 causal",
      "prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=256",
      "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 smooth=qk",
      "prefill qk=int8:per_tensor pv=int8:per_tensor out=fp16 d=64",
  };
  std::vector<std::pair<Spec, Tiling>> points;
  for (Arch arch : {Arch::sm_80, Arch::sm_89, Arch::sm_90a})
    for (const char* text : specs) {
      Spec s = parse_spec(text);
      s.arch = arch;
      s.varlen = true;
      if (!validate(s)) continue;   // fp8 P·V before sm_89
      const DeviceLimits limits = default_limits(arch);
      const Tiling t = default_tiling(s, limits);
      points.emplace_back(s, t);
      if (arch != Arch::sm_90a || !s.quantized()) continue;
      for (const Tiling& form : {tma_form(s, t, limits), fused_q_form(s, tma_form(s, t, limits), limits)})
        if (form != t) points.emplace_back(s, form);
    }
  Spec ws = parse_spec("prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=128 causal varlen arch=sm_90a");
  points.emplace_back(ws, parse_tiling("bm128_bn128_w8_s3_wg_tma_ws"));
  points.emplace_back(ws, parse_tiling("bm64_bn128_w4_s2_wg_tma_ws"));
  EXPECT_GE(test::expect_compiled_without_spills(points), points.size());
}

}  // namespace
}  // namespace qattn

// Linear-layer specs (phase linear): their text, kernel names and refusals, the tilings of each dataflow,
// the untuned choice by token count and the split-K rule. CPU only.
#include <gtest/gtest.h>

#include <string>

#include "generator/render.hpp"
#include "generator/search_space.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/linear.hpp"
#include "qattn/linear/linear_shape.h"
#include "qattn/validate.hpp"
#include "tests/common/expect_error.hpp"

namespace qattn {
namespace {

using test::expect_bad_input;

const char* const kWeights[] = {"fp16", "int8:per_channel", "int4:per_group"};
const Arch kArchs[] = {Arch::sm_80, Arch::sm_89, Arch::sm_90a};

Spec linear_spec(const std::string& w, Dataflow flow, Arch arch, int n = 6144, int k = 4096) {
  Spec s = parse_spec("linear a=fp16 w=" + w + " out=fp16 n=" + std::to_string(n) + " k=" + std::to_string(k));
  s.flow = flow;
  s.arch = arch;
  return s;
}

TEST(LinearSpec, TextAndNameRoundTrip) {
  const Spec s = parse_spec("linear k=4096 w=int4:per_group out=bf16 a=bf16 n=14336 bias flow=flat arch=sm_90a");
  EXPECT_EQ(to_string(s), "linear a=bf16 w=int4:per_group out=bf16 n=14336 k=4096 bias flow=flat arch=sm_90a");
  EXPECT_TRUE(validate(s)) << validate(s).reason;
  const Tiling t{8, 128, 4, 3};
  const std::string name = kernel_name(s, t);
  EXPECT_EQ(name, "qattn_linear_sm90a_abf16_wi4grp_obf16_n14336_k4096_bias_flat__bm8_bn128_w4_s3");
  const ParsedKernelName back = parse_kernel_name(name);
  EXPECT_EQ(back.spec, s);
  EXPECT_EQ(back.tiling, t);
  // The attention names are unchanged by the linear fields.
  const Spec p = parse_spec("prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=128 causal arch=sm_90a");
  EXPECT_EQ(kernel_name(p, Tiling{}), "qattn_prefill_sm90a_qki8tok_pve4m3chn_of16_d128_causal__bm128_bn64_w4_s2");
}

TEST(LinearSpec, RefusesWhatNoKernelRuns) {
  expect_bad_input([] { parse_spec("linear a=fp16 w=fp16 out=fp16 n=64 k=64 d=128"); }, "linear specs take no d=");
  expect_bad_input([] { parse_spec("linear a=fp16 w=fp16 out=fp16 n=64 k=64 causal"); }, "linear specs take no causal");
  expect_bad_input([] { parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=64 n=64"); }, "prefill specs take no n=");
  expect_bad_input([] { parse_spec("linear a=fp16 out=fp16 n=64 k=64"); }, "no w=");
  expect_bad_input([] { parse_spec("linear a=fp16 w=fp16 out=fp16 k=64"); }, "no n=");
  const auto refused = [](const std::string& text, const std::string& needle) {
    const Verdict v = validate(parse_spec(text));
    EXPECT_FALSE(v.ok) << text;
    EXPECT_NE(v.reason.find(needle), std::string::npos) << v.reason;
  };
  refused("linear a=fp16 w=int8:per_token out=fp16 n=64 k=64", "accepted: fp16, bf16, int8:per_channel");
  refused("linear a=fp16 w=bf16 out=fp16 n=64 k=64", "accepted: w=fp16");
  refused("linear a=int8 w=fp16 out=fp16 n=64 k=64", "a=int8 is not supported");
  refused("linear a=fp16 w=int4:per_group out=fp16 n=64 k=192", "a multiple of 128");
  refused("linear a=fp16 w=int8:per_channel out=fp16 n=64 k=40", "a multiple of 16");
  refused("linear a=fp16 w=fp16 out=fp16 n=64 k=12", "a multiple of 8");
  refused("linear a=fp16 w=fp16 out=fp16 n=64 k=64 flow=mma", "accepted for linear: auto, gemv, flat, gemm");
  refused("decode qk=fp16 pv=fp16 out=fp16 d=128 flow=flat", "linear-layer dataflow");
  // A spec built in code with an attention field set is refused too (its text would drop the field).
  Spec odd = parse_spec("linear a=fp16 w=fp16 out=fp16 n=64 k=64");
  odd.head_dim = 64;
  EXPECT_FALSE(validate(odd).ok);
  // A linear kernel is one dataflow; auto is a request.
  const Spec autos = linear_spec("fp16", Dataflow::automatic, Arch::sm_90a);
  EXPECT_FALSE(validate(autos, Tiling{8, 128, 4, 4}, default_limits(Arch::sm_90a)).ok);
  EXPECT_FALSE(validate(linear_spec("fp16", Dataflow::flat, Arch::sm_90a), Tiling{8, 128, 4, 4, true}, default_limits(Arch::sm_90a)).ok);
  test::expect_bad_input([&] { default_tiling(autos, default_limits(Arch::sm_90a)); }, "give flow=gemv, flow=flat or flow=gemm");
  // An attention shape is not a linear call's.
  EXPECT_FALSE(validate(autos, Problem{}).ok);
}

TEST(LinearSpec, EveryDataflowHasTilingsForEveryFormatAndArch) {
  for (Arch arch : kArchs)
    for (const char* w : kWeights)
      for (Dataflow flow : {Dataflow::gemv, Dataflow::flat, Dataflow::gemm}) {
        const Spec s = linear_spec(w, flow, arch);
        const std::vector<Tiling> c = gen::candidate_tilings(s, default_limits(arch));
        ASSERT_FALSE(c.empty()) << to_string(s);
        EXPECT_EQ(default_tiling(s, default_limits(arch)), c.front());
        for (const Tiling& t : c) {
          EXPECT_TRUE(validate(s, t, default_limits(arch))) << to_string(s) << " " << to_string(t);
          const gen::Source src = gen::render_kernel(s, t);
          EXPECT_NE(src.text.find("qattn/linear/linear.cuh"), std::string::npos);
          EXPECT_NE(src.text.find(kernel_name(s, t)), std::string::npos);
        }
      }
}

TEST(LinearSpec, UntunedChoiceByTokens) {
  EXPECT_EQ(default_linear_flow(1), Dataflow::gemv);
  EXPECT_EQ(default_linear_flow(kDefaultLinearM1 - 1), Dataflow::gemv);
  EXPECT_EQ(default_linear_flow(kDefaultLinearM1), Dataflow::flat);
  EXPECT_EQ(default_linear_flow(kDefaultLinearM2 - 1), Dataflow::flat);
  EXPECT_EQ(default_linear_flow(kDefaultLinearM2), Dataflow::gemm);
  const DeviceLimits lim = default_limits(Arch::sm_90a);
  for (int m : {1, 2, 3, 5, 8}) {
    const Tiling t = gen::linear_tiling(linear_spec("fp16", Dataflow::gemv, Arch::sm_90a), m, lim);
    EXPECT_GE(t.block_m, m);
    EXPECT_LT(t.block_m, 2 * m);
  }
  EXPECT_EQ(gen::linear_tiling(linear_spec("fp16", Dataflow::gemv, Arch::sm_90a), 100, lim).block_m, 8);
  EXPECT_EQ(gen::linear_tiling(linear_spec("int4:per_group", Dataflow::flat, Arch::sm_90a), 7, lim).block_m, 8);
  EXPECT_EQ(gen::linear_tiling(linear_spec("int4:per_group", Dataflow::flat, Arch::sm_90a), 9, lim).block_m, 16);
  EXPECT_EQ(gen::linear_tiling(linear_spec("int8:per_channel", Dataflow::gemm, Arch::sm_80), 100, lim).block_m, 64);
  EXPECT_EQ(gen::linear_tiling(linear_spec("int8:per_channel", Dataflow::gemm, Arch::sm_80), 4096, lim).block_m, 128);
}

// Every split starts on a k step (and int4 group) boundary, none is empty, and together they cover K.
TEST(LinearSpec, SplitKCoversKInWholeSteps) {
  for (const char* w : kWeights)
    for (Dataflow flow : {Dataflow::gemv, Dataflow::flat, Dataflow::gemm})
      for (int k : {128, 640, 4096, 14336})
        for (int m : {1, 7, 65, 1000})
          for (int requested : {0, 1, 3, 64, 100000}) {
            const Spec s = linear_spec(w, flow, Arch::sm_90a, 4096, k);
            const Tiling t = gen::linear_tiling(s, m, default_limits(Arch::sm_90a));
            const gen::LinearSplit sp = gen::linear_split(s, t, m, requested, 132);
            const int step = linear::linear_k_step(flow, s.weight.fmt, t.block_n, t.warps);
            SCOPED_TRACE(to_string(s) + " m=" + std::to_string(m) + " requested=" + std::to_string(requested));
            ASSERT_GE(sp.splits, 1);
            EXPECT_EQ(sp.k_split % step, 0);
            // The tensor-core kernels stage whole int4 groups with each k tile; gemv reads a group's scale per vector.
            if (s.weight.fmt == Fmt::int4 && flow != Dataflow::gemv) EXPECT_EQ(sp.k_split % kLinearInt4Group, 0);
            EXPECT_GE(static_cast<long long>(sp.splits) * sp.k_split, k);
            EXPECT_LT(static_cast<long long>(sp.splits - 1) * sp.k_split, k);   // the last split holds some K
            if (requested > 0) EXPECT_LE(sp.splits, requested);
            if (requested == 1) EXPECT_EQ(sp.splits, 1);
          }
}

}  // namespace
}  // namespace qattn

#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "generator/search_space.hpp"

namespace qattn {
namespace {

TEST(KernelName, ReadableExample) {
  const Spec s = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=k arch=sm_90a");
  EXPECT_EQ(kernel_name(s, Tiling{128, 64, 4, 2}),
            "qattn_prefill_sm90a_qki8tok_pvi8chn_of16_d128_causal_gqa4_smoothk__bm128_bn64_w4_s2");
  const Spec d = parse_spec("decode qk=fp8e4m3:per_head pv=fp8e4m3:per_head out=bf16 d=128 gqa=4 paged flow=gemv arch=sm_90a");
  EXPECT_EQ(kernel_name(d, Tiling{4, 32, 4, 3}), "qattn_decode_sm90a_qke4m3hd_pve4m3hd_obf16_d128_gqa4_paged_gemv__bm4_bn32_w4_s3");
}

TEST(KernelName, BijectiveOverTheGridAndUnusualSpecs) {
  std::vector<Spec> specs;
  for (Arch a : {Arch::sm_80, Arch::sm_86, Arch::sm_89, Arch::sm_90, Arch::sm_90a})
    for (const Spec& s : gen::default_grid(a)) specs.push_back(s);
  specs.push_back(parse_spec("decode qk=int4:per_thread pv=fp8e4m3:per_channel out=bf16 d=256 gqa=5 splitk=7 "
                             "softmax=unified_max accum=two_level smooth=qkv arch=sm_89"));
  specs.push_back(parse_spec("prefill qk=int8:per_token pv=fp16 out=fp16 d=96 causal gqa=2 accum=fp16 smooth=k arch=sm_80"));
  specs.push_back(parse_spec("prefill qk=int8:per_block pv=fp8e4m3:per_channel out=bf16 d=256 accum=two_level smooth=kv arch=sm_90a"));
  specs.push_back(parse_spec("decode qk=bf16 pv=bf16 out=bf16 d=64 softmax=sas accum=fp16 arch=sm_90"));
  specs.push_back(parse_spec("prefill qk=int4:per_thread pv=fp8e4m3:per_channel out=fp16 d=96 causal smooth=qkv rotate=hadamard arch=sm_89"));
  specs.push_back(parse_spec("prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 rotate=hadamard arch=sm_90a"));
  specs.push_back(parse_spec("decode qk=fp8e4m3:per_head pv=fp8e4m3:per_head out=fp16 d=64 paged flow=gemv arch=sm_89"));
  specs.push_back(parse_spec("decode qk=flashq:per_channel pv=flashq:per_channel out=fp16 d=128 flow=gemv arch=sm_80"));
  std::set<std::string> names;
  const std::regex safe("[A-Za-z0-9_]+");
  for (const Spec& s : specs)
    for (const Tiling& t : {Tiling{128, 64, 4, 2}, Tiling{64, 32, 8, 3}, Tiling{64, 128, 4, 2, true},
                            Tiling{64, 128, 4, 3, true, 4}, Tiling{128, 64, 4, 2, false, 2}}) {
      const std::string n = kernel_name(s, t);
      EXPECT_TRUE(std::regex_match(n, safe)) << n;
      EXPECT_TRUE(names.insert(n).second) << "duplicate name " << n;
      const ParsedKernelName p = parse_kernel_name(n);
      EXPECT_EQ(p.spec, s) << n;
      EXPECT_EQ(p.tiling, t) << n;
    }
}

TEST(KernelName, RejectsMalformedNames) {
  for (const char* bad : {"", "qattn_prefill_sm90a_qki8tok_pvi8chn_of16_d128", "foo_prefill_sm90a_qkf16_pvf16_of16_d64__bm1_bn1_w1_s1",
                          "qattn_prefill_sm75_qkf16_pvf16_of16_d64__bm64_bn64_w4_s2",
                          "qattn_prefill_sm90a_qki8xyz_pvf16_of16_d64__bm64_bn64_w4_s2",
                          "qattn_prefill_sm90a_qkf16_pvf16_of16_d64_gqa4_causal__bm64_bn64_w4_s2",
                          "qattn_prefill_sm90a_qkf16_pvf16_of16_d64__bm64_bn64_w4"}) {
    EXPECT_THROW(parse_kernel_name(bad), Error) << bad;
  }
}

TEST(KernelName, NeedsAConcreteArch) {
  EXPECT_THROW(kernel_name(parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=64"), Tiling{}), Error);
}

TEST(Tiling, TextRoundTrip) {
  const Tiling t{64, 128, 8, 3};
  EXPECT_EQ(to_string(t), "bm64_bn128_w8_s3");
  EXPECT_EQ(parse_tiling("bm64_bn128_w8_s3"), t);
  EXPECT_THROW(parse_tiling("bm64_bn128_w8"), Error);
  EXPECT_THROW(parse_tiling("bm0_bn128_w8_s3"), Error);
  const Tiling wg{64, 128, 4, 2, true};
  EXPECT_EQ(to_string(wg), "bm64_bn128_w4_s2_wg");
  EXPECT_EQ(parse_tiling("bm64_bn128_w4_s2_wg"), wg);
  EXPECT_NE(parse_tiling("bm64_bn128_w4_s2"), wg);
  const Tiling mb{64, 128, 4, 3, true, 4};
  EXPECT_EQ(to_string(mb), "bm64_bn128_w4_s3_wg_mb4");
  EXPECT_EQ(parse_tiling("bm64_bn128_w4_s3_wg_mb4"), mb);
  EXPECT_EQ(parse_tiling("bm64_bn128_w4_s3_mb2"), (Tiling{64, 128, 4, 3, false, 2}));
  for (const char* bad : {"bm64_bn128_w4_s2_xx", "bm64_bn128_w4_s2_wg_wg", "wg_bm64_bn128_w4_s2",
                          "bm64_bn128_w4_s2_mb4_wg", "bm64_bn128_w4_s2_mb0", "bm64_bn128_w4_s2_mbx", "bm64_bn128_w4_s2_mb"})
    EXPECT_THROW(parse_tiling(bad), Error) << bad;
}

}  // namespace
}  // namespace qattn

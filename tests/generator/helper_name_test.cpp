// Helper kernels in the one kernel-name grammar (include/qattn/kernel_name.hpp): every name the helper
// renderers produce is read back by parse_kernel_name to the fields that made it, and the rendered
// translation units carry that name, their header, body and launch bounds.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "generator/quant_plan.hpp"
#include "generator/render_helpers.hpp"
#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"

namespace qattn {
namespace {

// Round trip of one helper name; returns the name.
std::string expect_round_trip(const gen::Source& src, const HelperKernel* expected = nullptr) {
  SCOPED_TRACE(src.kernel_name);
  EXPECT_TRUE(std::regex_match(src.kernel_name, std::regex("qattn_[A-Za-z0-9_]+")));
  const ParsedKernelName p = parse_kernel_name(src.kernel_name);
  EXPECT_NE(p.family, KernelFamily::attention);
  EXPECT_EQ(p.family, p.helper.family);
  EXPECT_EQ(helper_kernel_name(p.helper), src.kernel_name);
  if (expected) {
    EXPECT_EQ(p.helper, *expected);
  }
  EXPECT_NE(src.text.find(" " + src.kernel_name + "(const "), std::string::npos) << src.text;
  return src.kernel_name;
}

// Every quantization pass of every plan the quantizer accepts, over the request's fields.
std::vector<std::pair<gen::QuantRequest, gen::QuantLaunch>> every_quant_pass() {
  std::vector<std::pair<gen::QuantRequest, gen::QuantLaunch>> out;
  for (Fmt in : {Fmt::fp16, Fmt::bf16})
    for (Gran g : {Gran::per_token, Gran::per_block, Gran::per_tensor, Gran::per_channel, Gran::per_warp, Gran::per_thread})
      for (int group : {0, 32, 64, 128})
        for (int d : {64, 96, 128, 256})
          for (bool transpose : {false, true})
            for (bool smooth : {false, true})
              for (bool block_mean : {false, true})
                for (int rotate : {quant::kRotateNone, quant::kRotateQ, quant::kRotateK})
                  for (int variant = 0; variant < 3; ++variant) {   // int8, packed int4, fp8e4m3 codes
                    gen::QuantRequest r;
                    r.in = in, r.gran = g, r.group = group, r.d = d, r.transpose = transpose, r.smooth = smooth;
                    r.block_mean = block_mean, r.rotate = rotate;
                    if (variant == 1) r.pack4 = true, r.qmax = 7;
                    if (variant == 2) r.code = Fmt::fp8e4m3;
                    for (const gen::QuantProblem& p : {gen::QuantProblem{2, 3, 1000, transpose ? 1024 : 1000},
                                                         gen::QuantProblem{1, 2, 5000, transpose ? 5120 : 5000, 1 << 20, 1024}}) {
                      if (!gen::quant_request_error(r, p).empty()) continue;
                      for (const gen::QuantLaunch& l : gen::plan_quant(r, p).launches) out.emplace_back(r, l);
                    }
                  }
  return out;
}

TEST(HelperKernelNames, EveryQuantizationPassRoundTrips) {
  std::set<std::string> names;
  for (const auto& [r, l] : every_quant_pass()) {
    const gen::Source src = gen::render_quant_pass(r, l, Arch::sm_90a);
    const HelperKernel expected = gen::quant_pass_kernel(r, l);
    names.insert(expect_round_trip(src, &expected));
    EXPECT_EQ(src.arch, Arch::sm_90a);
    EXPECT_NE(src.text.find("#include \"qattn/quant/quant.cuh\""), std::string::npos);
    EXPECT_NE(src.text.find(l.pass + "::run(p);"), std::string::npos) << src.text;
    const std::string bounds = "__launch_bounds__(" + std::to_string(l.block) +
                               (l.min_blocks ? ", " + std::to_string(l.min_blocks) : std::string()) + ")";
    EXPECT_NE(src.text.find(bounds), std::string::npos) << src.text;
  }
  EXPECT_GT(names.size(), 200u);
}

// One kernel per name: passes with different template-ids never share a name.
TEST(HelperKernelNames, DifferentPassesGetDifferentNames) {
  std::map<std::string, std::string> pass_of_name;
  for (const auto& [r, l] : every_quant_pass()) {
    const gen::Source src = gen::render_quant_pass(r, l, Arch::sm_90a);
    const auto [it, fresh] = pass_of_name.emplace(src.kernel_name, src.text);
    EXPECT_EQ(it->second, src.text) << src.kernel_name << " names two kernels";
  }
}

TEST(HelperKernelNames, LseCombineAppendAndFlashqRoundTrip) {
  for (const char* out : {"fp16", "bf16"})
    for (int d : {64, 128, 256}) {
      const std::string dim = " d=" + std::to_string(d) + " arch=sm_90a";
      const Spec prefill = parse_spec(std::string("prefill qk=int8:per_token pv=int8:per_channel smooth=k out=") + out + dim);
      expect_round_trip(gen::render_lse_rowdot(prefill));
      for (const char* cache : {"int8:per_token", "int4:per_group", "fp8e4m3:per_head"})
        for (const char* paged : {"", " paged"}) {
          const Spec decode = parse_spec(std::string("decode qk=") + cache + " pv=" + cache + " out=" + out + dim + paged);
          expect_round_trip(gen::render_decode_combine(decode));
          const gen::Source append = gen::render_kv_append(decode);
          expect_round_trip(append);
          expect_round_trip(gen::render_kv_gather(decode));
          EXPECT_EQ(parse_kernel_name(append.kernel_name).helper.code, decode.qk);
          EXPECT_EQ(parse_kernel_name(append.kernel_name).helper.paged, decode.paged);
          const Spec fq = parse_spec(std::string("decode qk=flashq:per_channel pv=flashq:per_channel out=") + out + dim + paged);
          for (const gen::Source& src : gen::render_flashq_kernels(fq)) expect_round_trip(src);
        }
    }
  expect_round_trip(gen::render_lse_addscaled(Arch::sm_80));
  EXPECT_EQ(gen::render_lse_addscaled(Arch::sm_80).kernel_name, "qattn_lsefix__addscaled");
}

// Helper names as they are cached: the quantizers' and the LSE correction's are unchanged.
TEST(HelperKernelNames, Examples) {
  gen::QuantRequest r;
  r.smooth = true;
  const gen::QuantPlan plan = gen::plan_quant(r, gen::QuantProblem{1, 1, 128, 128});
  EXPECT_EQ(gen::render_quant_pass(r, plan.launches.back(), Arch::sm_90a).kernel_name,
            "qattn_quant_f16_i8tok_smooth_d128__quantize_rows");
  const Spec s = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=bf16 d=64 smooth=k arch=sm_89");
  EXPECT_EQ(gen::render_lse_rowdot(s).kernel_name, "qattn_lsefix_bf16_d64__rowdot");
  const Spec cache = parse_spec("decode qk=int8:per_token pv=int8:per_token out=bf16 d=256 paged arch=sm_90a");
  EXPECT_EQ(gen::render_kv_smooth(cache, "mean").kernel_name, "qattn_kvsmooth_bf16_d256__mean");
  const HelperKernel fix = parse_kernel_name(gen::render_kv_smooth(cache, "lsefix").kernel_name).helper;
  EXPECT_EQ(fix.family, KernelFamily::kv_smooth);
  EXPECT_EQ(fix.in, Fmt::bf16);
  EXPECT_EQ(fix.head_dim, 256);
  EXPECT_EQ(fix.op, "lsefix");
  EXPECT_THROW(gen::render_kv_smooth(cache, "sum"), Error);
  const HelperKernel rows = parse_kernel_name("qattn_quant_bf16_i4pwrp32_qmean_rotq_d96__quantize_rows").helper;
  EXPECT_EQ(rows.family, KernelFamily::quant);
  EXPECT_EQ(rows.in, Fmt::bf16);
  EXPECT_EQ(rows.code, (Operand{Fmt::int4, Gran::per_warp}));
  EXPECT_EQ(rows.group, 32);
  EXPECT_TRUE(rows.block_mean);
  EXPECT_EQ(rows.rotate, 1);
  EXPECT_EQ(rows.head_dim, 96);
  EXPECT_EQ(rows.op, "quantize_rows");
}

TEST(HelperKernelNames, RejectsMalformedNames) {
  for (const char* bad : {"qattn_quant_f16_i8tok_d128", "qattn_quant_f32_i8tok_d128__quantize_rows",
                          "qattn_quant_f16_i9tok_d128__quantize_rows", "qattn_quant_f16_i8tok_vt_smooth_d128__quantize_rows",
                          "qattn_quant_f16_i8tok_d128_x__quantize_rows", "qattn_lsefix_f16__rowdot",
                          "qattn_combine_f16_d128__x", "qattn_combine_f16", "qattn_kvappend_i8tok_f16_d128_paged_paged",
                          "qattn_kvsmooth_f16_d128", "qattn_kvsmooth_f16__mean",
                          "qattn_flashq_f16_d64", "qattn_bogus_f16_d64", "qattn_decode_combine_of16_d128",
                          "qattn_quant_f16_i8tok_d128__quantize-rows"}) {
    EXPECT_THROW(parse_kernel_name(bad), Error) << bad;
  }
}

}  // namespace
}  // namespace qattn

#include <gtest/gtest.h>

#include "generator/embedded_templates.hpp"
#include "qattn/error.hpp"
#include "generator/render.hpp"
#include "generator/render_helpers.hpp"
#include "generator/search_space.hpp"

namespace qattn {
namespace {

bool embedded(const std::string& path) {
  for (const auto& f : gen::embedded_templates())
    if (path == f.path) return true;
  return false;
}

TEST(Render, TranslationUnitNamesTheKernelAndIncludesOnlyEmbeddedHeaders) {
  for (const Spec& s : gen::default_grid(Arch::sm_90a)) {
    const Tiling t = default_tiling(s, default_limits(s.arch));
    const gen::Source src = gen::render_kernel(s, t);
    EXPECT_EQ(src.arch, Arch::sm_90a);
    EXPECT_NE(src.text.find("extern \"C\" __global__"), std::string::npos);
    const bool decode = s.phase == Phase::decode;
    EXPECT_NE(src.text.find(src.kernel_name + (decode ? "(const qattn::DecodeParams p)" : "(const qattn::AttentionParams p)")),
              std::string::npos);
    const auto inc = src.text.find("#include \"");
    ASSERT_NE(inc, std::string::npos);
    const auto end = src.text.find('"', inc + 10);
    EXPECT_TRUE(embedded(src.text.substr(inc + 10, end - inc - 10))) << src.text;
    const char* body = decode ? (s.flow == Dataflow::gemv ? "decode::GemvKernel<" : "decode::Kernel<")
                       : s.qk.fmt == Fmt::int8 || s.qk.fmt == Fmt::int4 ? "prefill_int8::Kernel<"
                                               : "prefill_fp16::Kernel<";
    EXPECT_NE(src.text.find(body), std::string::npos) << src.text;
  }
}

// The int8 kernel's configuration struct as rendered (the members between its braces), one
// "static constexpr <type> <name> = <value>;" per line.
std::string config_of(const gen::Source& x) {
  const size_t at = x.text.find("struct qattn_config : qattn::prefill_int8::DefaultConfig {");
  if (at == std::string::npos) return "";
  return x.text.substr(at, x.text.find("};", at) - at);
}
bool sets(const gen::Source& x, const std::string& member) {
  return config_of(x).find("static constexpr " + member + ";") != std::string::npos;
}
bool mentions(const gen::Source& x, const std::string& name) {
  return config_of(x).find(" " + name + " = ") != std::string::npos;
}

// The int8 kernel's configuration selects mma.sync or wgmma; the tiling says which.
TEST(Render, Int8FormFollowsTheTiling) {
  const Spec s = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 smooth=k arch=sm_90a");
  const gen::Source wg = gen::render_kernel(s, Tiling{64, 128, 4, 2, true});
  const gen::Source sync = gen::render_kernel(s, Tiling{64, 128, 4, 2});
  for (const gen::Source* x : {&wg, &sync}) {
    EXPECT_TRUE(sets(*x, "qattn::Gran v_scale = qattn::Gran::per_channel")) << x->text;
    EXPECT_TRUE(sets(*x, "qattn::Fmt out = qattn::Fmt::fp16")) << x->text;
    EXPECT_TRUE(sets(*x, "int head_dim = 64")) << x->text;
    EXPECT_TRUE(sets(*x, "bool causal = false")) << x->text;
    EXPECT_TRUE(sets(*x, "int block_m = 64") && sets(*x, "int block_n = 128") && sets(*x, "int warps = 4") &&
                sets(*x, "int stages = 2"))
        << x->text;
    EXPECT_NE(x->text.find("qattn::prefill_int8::Kernel<qattn_config>::run(p, qattn_smem);"), std::string::npos) << x->text;
  }
  EXPECT_TRUE(sets(wg, "bool wgmma = true")) << wg.text;
  EXPECT_TRUE(sets(sync, "bool wgmma = false")) << sync.text;
  EXPECT_NE(wg.kernel_name, sync.kernel_name);
  EXPECT_GT(kernel_smem_bytes(s, Tiling{64, 128, 4, 2, true}), kernel_smem_bytes(s, Tiling{64, 128, 4, 2}));
  // The launch bounds carry the minimum blocks only when the tiling asks for them.
  EXPECT_NE(wg.text.find("__launch_bounds__(128)"), std::string::npos) << wg.text;
  const gen::Source mb = gen::render_kernel(s, Tiling{64, 128, 4, 3, true, 4});
  EXPECT_NE(mb.text.find("__launch_bounds__(128, 4)"), std::string::npos) << mb.text;
}

// pv=fp16 / fp8e4m3 and accum=fp16 / two_level set the configuration's pv and accum; the int8 P·V
// kernels with fp32 accumulation leave both at DefaultConfig's (the source names neither).
TEST(Render, PvFormatAndAccumulationAreConfigurationMembers) {
  const Tiling t{64, 64, 4, 2};
  const gen::Source f16 = gen::render_kernel(parse_spec("prefill qk=int8:per_token pv=fp16 out=fp16 d=128 accum=fp16 arch=sm_80"), t);
  EXPECT_TRUE(sets(f16, "qattn::Gran v_scale = qattn::Gran::none")) << f16.text;
  EXPECT_TRUE(sets(f16, "qattn::Fmt pv = qattn::Fmt::fp16")) << f16.text;
  EXPECT_TRUE(sets(f16, "qattn::Accum accum = qattn::Accum::fp16")) << f16.text;
  const gen::Source f8 = gen::render_kernel(
      parse_spec("prefill qk=int8:per_token pv=fp8e4m3:per_channel out=bf16 d=64 causal accum=two_level arch=sm_89"), t);
  EXPECT_TRUE(sets(f8, "qattn::Fmt out = qattn::Fmt::bf16") && sets(f8, "bool causal = true")) << f8.text;
  EXPECT_TRUE(sets(f8, "qattn::Fmt pv = qattn::Fmt::fp8e4m3")) << f8.text;
  EXPECT_TRUE(sets(f8, "qattn::Accum accum = qattn::Accum::two_level")) << f8.text;
  const gen::Source f8a = gen::render_kernel(parse_spec("prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=64 arch=sm_89"), t);
  EXPECT_TRUE(sets(f8a, "qattn::Fmt pv = qattn::Fmt::fp8e4m3")) << f8a.text;
  EXPECT_FALSE(mentions(f8a, "accum")) << f8a.text;
  const gen::Source i8 = gen::render_kernel(parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 arch=sm_89"), t);
  EXPECT_FALSE(mentions(i8, "pv") || mentions(i8, "accum")) << i8.text;
  EXPECT_THROW(gen::render_kernel(parse_spec("prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=64 arch=sm_80"), t), Error);
}

// smooth=q sets q_smooth; other specs render as before, without it.
TEST(Render, QSmoothingSetsItsConfigurationMember) {
  const Spec s = parse_spec("prefill qk=int8:per_block pv=int8:per_tensor out=fp16 d=128 causal smooth=qk arch=sm_89");
  const gen::Source q = gen::render_kernel(s, Tiling{64, 128, 4, 2});
  EXPECT_TRUE(sets(q, "bool q_smooth = true")) << q.text;
  Spec k = s;
  k.smooth = kSmoothK;
  const gen::Source plain = gen::render_kernel(k, Tiling{64, 128, 4, 2});
  EXPECT_FALSE(mentions(plain, "q_smooth")) << plain.text;
  EXPECT_NE(q.kernel_name, plain.kernel_name);
}

// smooth=v with int8 P·V sets v_smooth (the kernel normalises by the exact row sum and counts Σ P̂ only
// for the overflow guard); without V smoothing, or with a float P·V (always the exact sum), the
// source is as before.
TEST(Render, VSmoothingWithInt8PvSetsItsConfigurationMember) {
  const Tiling t{64, 128, 4, 3, true, 4};
  const gen::Source kv = gen::render_kernel(parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 smooth=kv arch=sm_90a"), t);
  EXPECT_TRUE(sets(kv, "bool v_smooth = true")) << kv.text;
  EXPECT_FALSE(mentions(kv, "fused_q") || mentions(kv, "k_block_scale")) << kv.text;
  const gen::Source k = gen::render_kernel(parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 smooth=k arch=sm_90a"), t);
  EXPECT_FALSE(mentions(k, "v_smooth")) << k.text;
  const gen::Source f8 =
      gen::render_kernel(parse_spec("prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=64 smooth=kv arch=sm_90a"), t);
  EXPECT_TRUE(sets(f8, "qattn::Fmt pv = qattn::Fmt::fp8e4m3")) << f8.text;
  EXPECT_FALSE(mentions(f8, "v_smooth")) << f8.text;
  // With the fused Q tile, fused_q carries Q's granularity; per_warp K also sets k_block_scale.
  Tiling qf = t;
  qf.q_fused = true;
  const gen::Source fused =
      gen::render_kernel(parse_spec("prefill qk=int8:per_warp pv=int8:per_channel out=fp16 d=64 smooth=kv arch=sm_90a"), qf);
  EXPECT_TRUE(sets(fused, "qattn::Gran fused_q = qattn::Gran::per_warp")) << fused.text;
  EXPECT_TRUE(sets(fused, "bool v_smooth = true") && sets(fused, "bool k_block_scale = true")) << fused.text;
}

// per_warp / per_thread Q/K scales reach the kernel expanded per row (generator/quant_plan.hpp): the spec renders
// the per_token kernel's configuration, under a name that keeps its own granularity. per_warp K shares one
// scale per 64 keys, which the wgmma form folds into the row factor (k_block_scale).
TEST(Render, FragmentGranularitiesRenderThePerTokenKernel) {
  const Spec tok = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal smooth=kv arch=sm_90a");
  for (const char* g : {"per_warp", "per_thread"}) {
    Spec s = tok;
    s.qk.gran = std::string(g) == "per_warp" ? Gran::per_warp : Gran::per_thread;
    for (const Tiling& t : {Tiling{64, 128, 4, 2, true}, Tiling{64, 128, 4, 2}}) {
      const gen::Source a = gen::render_kernel(s, t), b = gen::render_kernel(tok, t);
      EXPECT_NE(a.kernel_name, b.kernel_name);
      EXPECT_NE(a.kernel_name.find(std::string("_qki8") + (s.qk.gran == Gran::per_warp ? "wrp" : "thr")),
                std::string::npos) << a.kernel_name;
      ASSERT_FALSE(config_of(b).empty()) << b.text;
      if (s.qk.gran == Gran::per_warp && t.wgmma)
        EXPECT_EQ(config_of(a), config_of(b) + "  static constexpr bool k_block_scale = true;\n") << g;
      else
        EXPECT_EQ(config_of(a), config_of(b)) << g;
    }
  }
}

// K scales shared by 64-key groups (per_warp, per_block, per_tensor K) set k_block_scale in the wgmma
// form; the mma.sync form and per-key K scales leave it out.
TEST(Render, KBlockScalesFoldOnlyInTheWgmmaForm) {
  const Tiling wg{64, 128, 4, 2, true}, sync{64, 128, 4, 2};
  for (const char* g : {"per_block", "per_tensor"}) {
    const Spec s = parse_spec(std::string("prefill qk=int8:") + g + " pv=int8:per_tensor out=fp16 d=128 smooth=k arch=sm_90a");
    EXPECT_TRUE(sets(gen::render_kernel(s, wg), "bool k_block_scale = true")) << g;
    EXPECT_FALSE(mentions(gen::render_kernel(s, sync), "k_block_scale")) << g;
  }
  const Spec tok = parse_spec("prefill qk=int8:per_token pv=int8:per_tensor out=fp16 d=128 smooth=k arch=sm_90a");
  EXPECT_FALSE(mentions(gen::render_kernel(tok, wg), "k_block_scale"));
}

TEST(Render, InvalidPointsAreRefusedWithTheReason) {
  Spec s = parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=80 arch=sm_90a");
  try {
    gen::render_kernel(s, Tiling{});
    FAIL() << "rendered an unsupported spec";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input);
    EXPECT_NE(std::string(e.what()).find("accepted: 64, 96, 128, 256"), std::string::npos);
  }
}

TEST(Render, LaunchShapeCoversEveryQueryRow) {
  const Spec s = parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=128 arch=sm_90a gqa=4");
  const Tiling t{128, 64, 4, 2};
  const gen::LaunchShape l = gen::attention_launch(s, t, parse_problem("b=3,hq=8,hkv=2,q=257,kv=10"));
  EXPECT_EQ(l.grid[0], 3u);
  EXPECT_EQ(l.grid[1], 8u);
  EXPECT_EQ(l.grid[2], 3u);
  EXPECT_EQ(l.block, 128u);
  EXPECT_EQ(static_cast<int>(l.smem_bytes), kernel_smem_bytes(s, t));
  EXPECT_GT(l.smem_bytes, 0u);
}

// Causal INT8 wgmma form: grid (band, query tiles, bands) over batch x heads_q = 24 heads; causal FP16 and
// mma.sync keep the plain grid, each head's tiles last first (tile_order.h).
TEST(Render, CausalInt8LaunchGoesInBandsOfHeads) {
  const Spec s = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 arch=sm_90a");
  const Tiling t{64, 128, 4, 2, true};
  const Problem p = parse_problem("b=3,hq=8,hkv=2,q=257,kv=300");
  const gen::LaunchShape banded = gen::attention_launch(s, t, p, 5);
  EXPECT_EQ(banded.grid[0], 5u);
  EXPECT_EQ(banded.grid[1], 5u);   // 257 rows in tiles of 64
  EXPECT_EQ(banded.grid[2], 5u);   // 25 slots for 24 heads: the last band has one CTA per tile that exits
  EXPECT_EQ(gen::attention_launch(s, t, p, 10).grid[0], 8u);   // at most 10 per band: three bands of 8
  const gen::LaunchShape head_by_head = gen::attention_launch(s, t, p);
  EXPECT_EQ(head_by_head.grid[0], 1u);
  EXPECT_EQ(head_by_head.grid[2], 24u);
  const gen::LaunchShape one_band = gen::attention_launch(s, t, p, 1000);
  EXPECT_EQ(one_band.grid[0], 24u);
  EXPECT_EQ(one_band.grid[2], 1u);
  const Spec f = parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=128 causal gqa=4 arch=sm_90a");
  const gen::LaunchShape fp16 = gen::attention_launch(f, Tiling{128, 64, 4, 2}, p, 5);
  EXPECT_EQ(fp16.grid[0], 3u);   // 257 rows in tiles of 128
  EXPECT_EQ(fp16.grid[1], 8u);
  EXPECT_EQ(fp16.grid[2], 3u);
  const gen::LaunchShape mma_sync = gen::attention_launch(s, Tiling{64, 128, 4, 2}, p, 5);   // no bands either
  EXPECT_EQ(mma_sync.grid[0], 5u);
  EXPECT_EQ(mma_sync.grid[1], 8u);
  EXPECT_EQ(mma_sync.grid[2], 3u);
}

// Decode: grid (splits, KV heads x row blocks, batch); the rows of a KV head are gqa x new tokens.
TEST(Render, DecodeLaunchCoversSplitsAndRowBlocks) {
  const Spec s = parse_spec("decode qk=int4:per_token pv=int4:per_token out=bf16 d=128 gqa=5 causal paged arch=sm_90a");
  const Tiling t{16, 32, 4, 2};
  const gen::LaunchShape l = gen::decode_launch(s, t, parse_problem("b=3,hq=40,hkv=8,q=4,kv=1000"), 7);
  EXPECT_EQ(l.grid[0], 7u);
  EXPECT_EQ(l.grid[1], 8u * 2u);   // 20 rows per KV head: two blocks of 16
  EXPECT_EQ(l.grid[2], 3u);
  EXPECT_EQ(l.block, 128u);
  EXPECT_EQ(static_cast<int>(l.smem_bytes), kernel_smem_bytes(s, t));
  const gen::Source src = gen::render_kernel(s, t);
  EXPECT_NE(src.text.find("qattn::Fmt::int4, qattn::Gran::per_token, qattn::Fmt::bf16, 128, true, true, qattn::SoftmaxMode::exact, 16, 32, 4, 2>"),
            std::string::npos) << src.text;
  // The helper kernels of a decode spec: combine and append, named by the family grammar.
  EXPECT_EQ(gen::render_decode_combine(s).kernel_name, "qattn_combine_bf16_d128");
  EXPECT_EQ(gen::render_kv_append(s).kernel_name, "qattn_kvappend_i4tok_bf16_d128_paged");
  EXPECT_EQ(gen::render_kv_gather(s).kernel_name, "qattn_kvgather_i4tok_bf16_d128_paged");
}

TEST(EmbeddedTemplates, HaveADigestAndTheAbiHeader) {
  EXPECT_TRUE(embedded("qattn/abi.h"));
  EXPECT_EQ(std::string(gen::embedded_templates_digest()).size(), 64u);
}

}  // namespace
}  // namespace qattn

// Prefill qk=int4 (issue #3) in the generator: validate(), dispatch_note(), the _i4mma tiling token in
// kernel names, the per-arch search space (packed int4 on sm_80 .. sm_89, int8 compute on sm_90 /
// sm_90a) and the rendered template instantiation.
#include <gtest/gtest.h>

#include <string>

#include "qattn/attention/prefill_int8_shape.h"
#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "generator/render.hpp"
#include "generator/search_space.hpp"
#include "qattn/validate.hpp"

namespace qattn {
namespace {

const char* kGrans[] = {"per_tensor", "per_block", "per_warp", "per_thread", "per_token"};

Spec int4_spec(const std::string& gran, int d, bool causal, Arch arch, const std::string& extra = "") {
  Spec s = parse_spec("prefill qk=int4:" + gran + " pv=int8:per_channel out=fp16 d=" + std::to_string(d) +
                      (causal ? " causal" : "") + extra);
  s.arch = arch;
  return s;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Int4Prefill, EveryGranularityHeadDimAndMaskIsSupported) {
  for (const char* g : kGrans)
    for (int d : {64, 96, 128, 256})
      for (bool causal : {false, true})
        for (const char* extra : {"", " gqa=4 smooth=k", " smooth=kv"}) {
          const Spec s = int4_spec(g, d, causal, Arch::unset, extra);
          EXPECT_TRUE(validate(s).ok) << to_string(s) << ": " << validate(s).reason;
        }
}

TEST(Int4Prefill, RefusalsNameWhatIsAccepted) {
  struct Row {
    const char* spec;
    const char* reason;
  };
  const Row rows[] = {
      {"prefill qk=int4:per_channel pv=int8:per_tensor out=fp16 d=128", "per_tensor, per_block, per_warp, per_thread, per_token"},
      {"prefill qk=int4:per_group pv=int8:per_tensor out=fp16 d=128", "qk=int4:per_group is not supported"},
      {"prefill qk=int4:per_token pv=int4:per_token out=fp16 d=128", "qk=int4 with pv=int4"},
      {"prefill qk=int4:per_token pv=int8:per_token out=fp16 d=128", "accepted: per_tensor, per_channel"},
      {"prefill qk=int4:per_token pv=int8:per_tensor out=int8 d=128", "accepted: fp16, bf16"},
      {"prefill qk=int4:per_token pv=int8:per_channel out=fp16 d=192", "accepted: 64, 96, 128, 256"},
  };
  for (const Row& r : rows) {
    const Verdict v = validate(parse_spec(r.spec));
    EXPECT_FALSE(v.ok) << r.spec;
    EXPECT_TRUE(contains(v.reason, r.reason)) << r.spec << ": " << v.reason;
    EXPECT_FALSE(contains(v.reason, "\n")) << v.reason;
  }
}

// _i4mma: prefill qk=int4 only, never with _wg; _wg with qk=int4 is the int8-compute wgmma form.
TEST(Int4Prefill, TilingFormsAreCheckedWithReasons) {
  const Tiling packed{64, 64, 4, 2, false, 0, true};
  for (Arch a : {Arch::sm_80, Arch::sm_86, Arch::sm_89, Arch::sm_90, Arch::sm_90a}) {
    const Spec s = int4_spec("per_token", 128, true, a, " smooth=k");
    EXPECT_TRUE(validate(s, packed, default_limits(a)).ok) << to_string(a) << ": " << validate(s, packed, default_limits(a)).reason;
    EXPECT_TRUE(validate(s, Tiling{64, 64, 4, 2}, default_limits(a)).ok) << to_string(a);   // int8 compute
  }
  const Spec h = int4_spec("per_token", 128, false, Arch::sm_90a);
  const DeviceLimits lim = default_limits(Arch::sm_90a);
  EXPECT_TRUE(validate(h, Tiling{64, 128, 4, 2, true}, lim).ok);
  Verdict v = validate(h, Tiling{64, 128, 4, 2, true, 0, true}, lim);
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(contains(v.reason, "mma.sync only")) << v.reason;
  // Q smoothing's ΔS product reads int8 K tiles: smooth=q runs as int8 compute, the packed form is refused,
  // and the default form (and its dispatch note) says so on every arch.
  for (Arch a : {Arch::sm_80, Arch::sm_89, Arch::sm_90a}) {
    const Spec q = int4_spec("per_token", 128, false, a, " smooth=qk");
    const Verdict vq = validate(q, packed, default_limits(a));
    EXPECT_FALSE(vq.ok) << to_string(a);
    EXPECT_TRUE(contains(vq.reason, "drop _i4mma")) << vq.reason;
    EXPECT_FALSE(int4_mma_by_default(q));
    EXPECT_FALSE(default_tiling(q, default_limits(a)).int4_mma) << to_string(a);
    EXPECT_TRUE(contains(dispatch_note(q), "int8 compute")) << to_string(a) << ": " << dispatch_note(q);
  }
  Spec i8 = h;
  i8.qk.fmt = Fmt::int8;
  v = validate(i8, packed, lim);
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(contains(v.reason, "qk=int4 only")) << v.reason;
  const Spec f = parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=128 arch=sm_90a");
  EXPECT_FALSE(validate(f, packed, lim).ok);
}

TEST(Int4Prefill, DispatchNoteSaysWhenInt8ComputeServesTheSpec) {
  for (Arch a : {Arch::sm_90, Arch::sm_90a}) {
    const std::string note = dispatch_note(int4_spec("per_warp", 128, false, a));
    EXPECT_TRUE(contains(note, "qk=int4 on " + std::string(to_string(a)) + " runs as int8 compute")) << note;
    EXPECT_TRUE(contains(note, "emulated on Hopper")) << note;
    EXPECT_TRUE(contains(note, "[-7,7]")) << note;
    const std::string forced = dispatch_note(int4_spec("per_warp", 128, false, a), Tiling{64, 64, 4, 2, false, 0, true});
    EXPECT_TRUE(contains(forced, "emulated")) << forced;
    EXPECT_EQ(dispatch_note(int4_spec("per_warp", 128, false, a), Tiling{64, 128, 4, 2, true}), note);
  }
  for (Arch a : {Arch::sm_80, Arch::sm_86, Arch::sm_89}) {
    const Spec s = int4_spec("per_token", 96, true, a);
    EXPECT_EQ(dispatch_note(s), "") << to_string(a);
    EXPECT_EQ(dispatch_note(s, Tiling{64, 64, 4, 2, false, 0, true}), "") << to_string(a);
    EXPECT_TRUE(contains(dispatch_note(s, Tiling{64, 64, 4, 2}), "int8 compute")) << to_string(a);
  }
  EXPECT_EQ(dispatch_note(parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 arch=sm_90a")), "");
  EXPECT_EQ(dispatch_note(int4_spec("per_token", 128, false, Arch::unset)), "");
  EXPECT_TRUE(int4_mma_by_default(Arch::sm_89));
  EXPECT_FALSE(int4_mma_by_default(Arch::sm_90));
}

// The default form per arch: packed int4 (and only it) on sm_80 .. sm_89; int8 compute, never _i4mma,
// on sm_90 / sm_90a (wgmma first on sm_90a).
TEST(Int4Prefill, SearchSpaceOffersTheArchsForm) {
  for (Arch a : {Arch::sm_80, Arch::sm_86, Arch::sm_89, Arch::sm_90, Arch::sm_90a})
    for (const char* g : kGrans)
      for (int d : {64, 96, 128, 256})
        for (bool causal : {false, true}) {
          const Spec s = int4_spec(g, d, causal, a, " smooth=k");
          const auto c = gen::candidate_tilings(s, default_limits(a));
          ASSERT_FALSE(c.empty()) << to_string(s);
          for (const Tiling& t : c) {
            EXPECT_EQ(t.int4_mma, int4_mma_by_default(a)) << to_string(s) << " " << to_string(t);
            if (t.int4_mma) { EXPECT_FALSE(t.wgmma) << to_string(t); }
            EXPECT_TRUE(validate(s, t, default_limits(a)).ok) << to_string(t);
          }
          EXPECT_EQ(c.front().wgmma, a == Arch::sm_90a) << to_string(s);
        }
}

TEST(Int4Prefill, KernelNamesRoundTripAndDifferByForm) {
  const Spec s = int4_spec("per_thread", 96, true, Arch::sm_90a, " gqa=2 smooth=kv");
  const Tiling packed{64, 64, 4, 2, false, 0, true}, int8c{64, 64, 4, 2};
  const std::string a = kernel_name(s, packed), b = kernel_name(s, int8c);
  EXPECT_EQ(a, "qattn_prefill_sm90a_qki4thr_pvi8chn_of16_d96_causal_gqa2_smoothkv__bm64_bn64_w4_s2_i4mma");
  EXPECT_EQ(b, "qattn_prefill_sm90a_qki4thr_pvi8chn_of16_d96_causal_gqa2_smoothkv__bm64_bn64_w4_s2");
  for (const std::string& n : {a, b}) {
    const ParsedKernelName p = parse_kernel_name(n);
    EXPECT_EQ(p.spec, s);
    EXPECT_EQ(kernel_name(p.spec, p.tiling), n);
  }
  EXPECT_TRUE(parse_kernel_name(a).tiling.int4_mma);
  EXPECT_FALSE(parse_kernel_name(b).tiling.int4_mma);
  const Tiling mb{64, 64, 4, 2, false, 2, true};
  EXPECT_EQ(to_string(mb), "bm64_bn64_w4_s2_i4mma_mb2");
  EXPECT_EQ(parse_tiling("bm64_bn64_w4_s2_i4mma_mb2"), mb);
  for (const char* bad : {"bm64_bn64_w4_s2_wg_i4mma", "bm64_bn64_w4_s2_i4mma_wg", "bm64_bn64_w4_s2_i4", "bm64_bn64_w4_s2_mb2_i4mma"})
    EXPECT_THROW(parse_tiling(bad), Error) << bad;
}

// Packed: the int8 kernel with packed_int4 set and half-size Q / K tiles; int8 compute: without it.
// Both set int4_codes (raw, exactly converted S: see prefill_int8/layout.cuh's kRawS).
TEST(Int4Prefill, RenderPicksTheFormAndSharedMemoryShrinks) {
  const Spec s = int4_spec("per_token", 128, false, Arch::sm_89, " smooth=k");
  const gen::Source p = gen::render_kernel(s, Tiling{64, 64, 4, 2, false, 0, true});
  EXPECT_TRUE(contains(p.text, "  static constexpr bool wgmma = false;\n  static constexpr bool packed_int4 = true;\n"
                               "  static constexpr bool int4_codes = true;\n};"))
      << p.text;
  const gen::Source c = gen::render_kernel(s, Tiling{64, 64, 4, 2});
  EXPECT_TRUE(contains(c.text, "  static constexpr bool wgmma = false;\n  static constexpr bool int4_codes = true;\n};"))
      << c.text;
  for (int d : {64, 96, 128, 256}) {
    const Spec sd = int4_spec("per_token", d, false, Arch::sm_80);
    const Tiling t{64, 32, 4, 2};
    Tiling tp = t;
    tp.int4_mma = true;
    // Q (64 rows) and two stages of K (32 rows) lose half their bytes.
    EXPECT_EQ(kernel_smem_bytes(sd, t) - kernel_smem_bytes(sd, tp), (64 + 2 * 32) * d / 2) << d;
    EXPECT_EQ(prefill_int8::qk_row_bytes(d, true), d / 2);
  }
}

}  // namespace
}  // namespace qattn

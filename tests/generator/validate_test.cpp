#include <gtest/gtest.h>

#include <algorithm>

#include "qattn/attention/prefill_int8_shape.h"

#include "generator/search_space.hpp"
#include "qattn/validate.hpp"

namespace qattn {
namespace {

struct Row {
  const char* spec;
  bool ok;
  const char* reason_contains;   // a fragment of the reason (what is accepted)
};

// The validation table: every unsupported combination says why and what is accepted.
const Row kTable[] = {
    {"prefill qk=fp16 pv=fp16 out=fp16 d=128", true, ""},
    {"prefill qk=bf16 pv=bf16 out=bf16 d=64 causal gqa=8", true, ""},
    {"prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 smooth=k", true, ""},
    {"prefill qk=int8:per_block pv=int8:per_tensor out=bf16 d=64 causal", true, ""},
    {"prefill qk=int8:per_tensor pv=int8:per_tensor out=fp16 d=128 gqa=4", true, ""},
    {"decode qk=int8:per_token pv=int8:per_token out=fp16 d=128", true, ""},
    {"decode qk=int4:per_group pv=int4:per_group out=bf16 d=256 causal gqa=5 splitk=8 paged", true, ""},
    {"decode qk=bf16 pv=bf16 out=bf16 d=64 gqa=16", true, ""},
    {"decode qk=fp16 pv=fp16 out=bf16 d=128", false, "accepted: out=fp16"},
    {"decode qk=int8:per_token pv=int4:per_token out=fp16 d=128", false, "pv equal to qk"},
    {"decode qk=int8:per_channel pv=int8:per_channel out=fp16 d=128", false, "int4:per_group"},
    {"decode qk=fp8e4m3:per_tensor pv=fp8e4m3:per_tensor out=fp16 d=128", false, "fp8e4m3:per_head"},
    {"decode qk=fp8e4m3:per_head pv=fp8e4m3:per_head out=fp16 d=128", true, ""},
    {"decode qk=flashq:per_channel pv=flashq:per_channel out=bf16 d=128 causal gqa=4", true, ""},
    {"decode qk=flashq:per_token pv=flashq:per_token out=fp16 d=128", false, "flashq:per_channel"},
    {"decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 flow=gemv", true, ""},
    {"prefill qk=fp16 pv=fp16 out=fp16 d=128 flow=gemv", false, "decode dataflow"},
    {"prefill qk=fp16 pv=fp16 out=fp16 d=128 flow=mma", false, "decode dataflow"},
    {"decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 flow=mma", true, ""},
    {"decode qk=int4:per_token pv=int4:per_token out=fp16 d=96", false, "accepted: 64, 128, 256"},
    {"decode qk=int4:per_token pv=int4:per_token out=fp16 d=128 softmax=unified_max", true, ""},
    {"decode qk=int4:per_token pv=int4:per_token out=fp16 d=128 softmax=sas", true, ""},
    {"decode qk=int4:per_token pv=int4:per_token out=fp16 d=128 smooth=k", false, "accepted for decode: none"},
    {"prefill qk=fp16 pv=fp16 out=fp16 d=128 paged", false, "paged applies to a decode"},
    {"prefill qk=fp16 pv=fp16 out=fp16 d=96", true, ""},
    {"prefill qk=bf16 pv=bf16 out=bf16 d=256 causal gqa=4", true, ""},
    {"prefill qk=int8:per_block pv=int8:per_channel out=fp16 d=96 causal smooth=kv", true, ""},
    {"prefill qk=int8:per_tensor pv=int8:per_tensor out=bf16 d=256", true, ""},
    {"prefill qk=fp16 pv=fp16 out=fp16 d=80", false, "accepted: 64, 96, 128, 256"},
    {"prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=192", false, "accepted: 64, 96, 128, 256"},
    {"prefill qk=fp16 pv=fp16 out=fp16 d=128 splitk=4", false, "decode only"},
    {"prefill qk=fp16 pv=fp16 out=fp16 d=128 softmax=sas", false, "accepted for prefill: exact"},
    {"prefill qk=int8:per_token pv=int8:per_tensor out=fp16 d=128 accum=two_level", false, "accepted: fp32"},
    // Quantized Q·K^T with fp16 / fp8 P·V and the accumulation modes (issue #3).
    {"prefill qk=int8:per_token pv=fp16 out=fp16 d=128", true, ""},
    {"prefill qk=int8:per_block pv=fp16 out=bf16 d=96 causal gqa=4 smooth=k", true, ""},
    {"prefill qk=int8:per_token pv=fp16 out=fp16 d=256 accum=fp16 arch=sm_80", true, ""},
    {"prefill qk=int8:per_token pv=fp16 out=bf16 d=128 accum=fp16", false, "accepted: accum=fp32, or out=fp16"},
    {"prefill qk=int8:per_token pv=fp16 out=fp16 d=128 accum=two_level", false, "accepted: fp32, fp16"},
    {"prefill qk=int8:per_token pv=fp16 out=fp16 d=128 smooth=kv", false, "accepted: none, k"},
    {"prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=128", true, ""},
    {"prefill qk=int8:per_token pv=fp8e4m3:per_channel out=bf16 d=64 causal smooth=kv accum=two_level arch=sm_89", true, ""},
    {"prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=256 accum=two_level arch=sm_90a", true, ""},
    {"prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=128 arch=sm_80", false,
     "no FP8 mma before sm_89; accepted: pv=fp16"},
    {"prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=128 arch=sm_86", false, "no FP8 mma before sm_89"},
    {"prefill qk=int8:per_token pv=fp8e4m3:per_tensor out=fp16 d=128", false, "accepted: per_channel"},
    {"prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=128 accum=fp16", false, "accepted: fp32, two_level"},
    {"prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 accum=fp16", false, "int32 accumulation is exact"},
    {"prefill qk=fp16 pv=fp16 out=fp16 d=128 accum=fp16", false, "accepted with qk=fp16|bf16: fp32"},
    {"prefill qk=int8:per_token pv=bf16 out=bf16 d=128", false, "pv=fp16, pv=fp8e4m3:per_channel"},
    {"prefill qk=fp16 pv=bf16 out=fp16 d=128", false, "needs pv=fp16"},
    {"prefill qk=fp16 pv=fp16 out=bf16 d=128", false, "out equal to the input format"},
    {"prefill qk=fp16 pv=fp16 out=fp16 d=128 smooth=k", false, "smoothing applies to quantized"},
    {"prefill qk=int8:per_warp pv=int8:per_tensor out=fp16 d=128", true, ""},
    {"prefill qk=int8:per_thread pv=int8:per_channel out=bf16 d=64 causal gqa=4 smooth=kv", true, ""},
    {"prefill qk=int8:per_warp pv=int8:per_channel out=fp16 d=256 smooth=k", true, ""},
    {"prefill qk=int8:per_thread pv=int8:per_tensor out=fp16 d=96", true, ""},
    {"prefill qk=int8:per_channel pv=int8:per_tensor out=fp16 d=128", false,
     "accepted: per_tensor, per_block, per_warp, per_thread, per_token"},
    {"prefill qk=int8:per_thread pv=int8:per_tensor out=fp16 d=128 smooth=qk", true, ""},
    {"prefill qk=int8:per_token pv=int8:per_token out=fp16 d=128", false, "accepted: per_tensor, per_channel"},
    {"prefill qk=int8:per_token pv=int8:per_tensor out=int8 d=128", false, "accepted: fp16, bf16"},
    {"prefill qk=int8:per_token pv=int8:per_tensor out=fp16 d=128 smooth=qk", true, ""},
    {"prefill qk=int8:per_tensor pv=int8:per_tensor out=fp16 d=64 smooth=q", true, ""},
    {"prefill qk=int8:per_block pv=int8:per_channel out=bf16 d=256 causal smooth=qkv", true, ""},
    {"prefill qk=int8:per_warp pv=int8:per_channel out=fp16 d=96 smooth=qv", true, ""},
    {"prefill qk=fp16 pv=fp16 out=fp16 d=128 smooth=q", false, "smoothing applies to quantized"},
    {"decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 smooth=q", false, "accepted for decode: none"},
    {"prefill qk=int8:per_token pv=int8:per_tensor out=fp16 d=128 smooth=kv", false, "needs per-channel V scales"},
    {"prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 smooth=kv", true, ""},
    {"prefill qk=int4:per_thread pv=int8:per_tensor out=fp16 d=128", true, ""},
    // qk=fp8e4m3: the wgmma kernel (sm_90a), every granularity qk=int8 takes, quantized P·V only, no Q smoothing.
    {"prefill qk=fp8e4m3:per_token pv=int8:per_tensor out=fp16 d=128", true, ""},
    {"prefill qk=fp8e4m3:per_block pv=fp8e4m3:per_channel out=bf16 d=128 causal gqa=4 smooth=kv arch=sm_90a", true, ""},
    {"prefill qk=fp8e4m3:per_warp pv=fp8e4m3:per_channel out=fp16 d=256 accum=two_level arch=sm_90a", true, ""},
    {"prefill qk=fp8e4m3:per_token pv=fp8e4m3:per_channel out=fp16 d=128 smooth=k rotate=hadamard", true, ""},
    {"prefill qk=fp8e4m3:per_token pv=fp8e4m3:per_channel out=fp16 d=128 arch=sm_89", false, "accepted: arch=sm_90a"},
    {"prefill qk=fp8e4m3:per_token pv=fp8e4m3:per_channel out=fp16 d=128 arch=sm_90", false, "wgmma kernel only"},
    {"prefill qk=fp8e4m3:per_token pv=fp16 out=fp16 d=128", false, "accepted: pv=fp8e4m3:per_channel"},
    {"prefill qk=fp8e4m3:per_token pv=fp8e4m3:per_channel out=fp16 d=128 smooth=qk", false, "accepted: none, k, v, kv"},
    {"prefill qk=fp8e4m3:per_channel pv=fp8e4m3:per_channel out=fp16 d=128", false,
     "accepted: per_tensor, per_block, per_warp, per_thread, per_token"},
    {"prefill qk=fp8e4m3:per_tensor pv=fp8e4m3:per_channel out=fp16 d=128 rotate=hadamard", false,
     "accepted: per_block, per_warp, per_thread, per_token"},
    {"prefill qk=flashq:per_channel pv=flashq:per_channel out=fp16 d=128", false, "accepted: fp16, bf16, int8, int4, fp8e4m3"},
    {"prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 smooth=kv rotate=hadamard", true, ""},
    {"prefill qk=int4:per_thread pv=int8:per_channel out=fp16 d=96 causal smooth=qk rotate=hadamard", true, ""},
    {"prefill qk=int8:per_block pv=fp16 out=bf16 d=256 rotate=hadamard", true, ""},
    {"prefill qk=int8:per_tensor pv=int8:per_tensor out=fp16 d=128 rotate=hadamard", false,
     "accepted: per_block, per_warp, per_thread, per_token"},
    {"prefill qk=fp16 pv=fp16 out=fp16 d=128 rotate=hadamard", false, "applies to quantized Q/K"},
    {"decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 rotate=hadamard", false, "accepted for decode: none"},
};

TEST(Validate, Table) {
  for (const Row& r : kTable) {
    SCOPED_TRACE(r.spec);
    const Verdict v = validate(parse_spec(r.spec));
    EXPECT_EQ(v.ok, r.ok) << v.reason;
    if (!r.ok) {
      EXPECT_NE(v.reason.find(r.reason_contains), std::string::npos) << v.reason;
      EXPECT_EQ(v.reason.find('\n'), std::string::npos);
    }
  }
}

TEST(Validate, TilingNeedsArchAndFitsSharedMemory) {
  Spec s = parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=128");
  EXPECT_FALSE(validate(s, Tiling{128, 64, 4, 2}, default_limits(Arch::sm_90a)).ok);   // no arch
  s.arch = Arch::sm_90a;
  EXPECT_TRUE(validate(s, default_tiling(s, default_limits(s.arch)), default_limits(s.arch)).ok);
  DeviceLimits tiny;
  tiny.max_smem_per_block = 1024;
  const Verdict v = validate(s, Tiling{128, 64, 4, 2}, tiny);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("shared memory"), std::string::npos) << v.reason;
  EXPECT_FALSE(validate(s, Tiling{7, 64, 4, 2}, default_limits(s.arch)).ok);
}

// The wgmma form: int8 on sm_90a only, one warpgroup per 64 rows, bn 64 or 128; preferred there.
TEST(Validate, WgmmaTilingsOnlyForInt8OnSm90a) {
  Spec s = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal smooth=kv arch=sm_90a");
  const DeviceLimits lim = default_limits(Arch::sm_90a);
  EXPECT_TRUE(validate(s, Tiling{64, 128, 4, 2, true}, lim).ok);
  EXPECT_TRUE(validate(s, Tiling{128, 64, 8, 2, true}, lim).ok);
  EXPECT_FALSE(validate(s, Tiling{128, 128, 4, 2, true}, lim).ok);   // two m16 tiles per warp
  EXPECT_FALSE(validate(s, Tiling{64, 32, 4, 2, true}, lim).ok);     // no m64n32 product in use
  EXPECT_TRUE(default_tiling(s, lim).wgmma);
  for (Arch a : {Arch::sm_80, Arch::sm_89, Arch::sm_90}) {
    s.arch = a;
    const Verdict v = validate(s, Tiling{64, 128, 4, 2, true}, default_limits(a));
    EXPECT_FALSE(v.ok);
    EXPECT_NE(v.reason.find("needs arch=sm_90a"), std::string::npos) << v.reason;
    for (const Tiling& t : gen::candidate_tilings(s, default_limits(a))) EXPECT_FALSE(t.wgmma) << to_string(t);
  }
  Spec f = parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=128 arch=sm_90a");
  const Verdict v = validate(f, Tiling{64, 128, 4, 2, true}, lim);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("int8 prefill kernel only"), std::string::npos) << v.reason;
  EXPECT_FALSE(default_tiling(f, lim).wgmma);
}

// pv=fp16 runs the mma.sync form only: validate refuses _wg with a reason, the tuner never offers it,
// and the fp16 V tile (2 bytes per element) counts in shared memory. pv=fp8e4m3 also has the wgmma
// form (native e4m3 on sm_90a): the default there, except with Q smoothing (mma.sync only).
TEST(Validate, FloatPvFormatsPickTheirFormAndCountTheirSharedMemory) {
  const DeviceLimits lim = default_limits(Arch::sm_90a);
  for (const char* text : {"prefill qk=int8:per_token pv=fp16 out=fp16 d=128 arch=sm_90a",
                           "prefill qk=int8:per_token pv=fp16 out=fp16 d=64 accum=fp16 arch=sm_90a",
                           "prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=128 smooth=qkv arch=sm_90a"}) {
    const Spec s = parse_spec(text);
    const Verdict v = validate(s, Tiling{64, 128, 4, 2, true}, lim);
    EXPECT_FALSE(v.ok) << text;
    EXPECT_NE(v.reason.find("drop _wg"), std::string::npos) << v.reason;
    const auto c = gen::candidate_tilings(s, lim);
    EXPECT_FALSE(c.empty()) << text;
    for (const Tiling& t : c) EXPECT_FALSE(t.wgmma) << text << " " << to_string(t);
  }
  EXPECT_NE(validate(parse_spec("prefill qk=int8:per_token pv=fp16 out=fp16 d=128 arch=sm_90a"), Tiling{64, 128, 4, 2, true}, lim)
                .reason.find("pv=fp16 uses the mma.sync form"),
            std::string::npos);
  for (const char* text : {"prefill qk=int8:per_token pv=fp8e4m3:per_channel out=bf16 d=128 smooth=kv arch=sm_90a",
                           "prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=256 accum=two_level arch=sm_90a",
                           "prefill qk=int4:per_thread pv=fp8e4m3:per_channel out=fp16 d=64 smooth=k arch=sm_90a"}) {
    const Spec s = parse_spec(text);
    EXPECT_TRUE(default_tiling(s, lim).wgmma) << text;
    const auto c = gen::candidate_tilings(s, lim);
    EXPECT_TRUE(std::any_of(c.begin(), c.end(), [](const Tiling& t) { return !t.wgmma; })) << text;   // mma.sync stays a candidate
    Spec on_89 = s;
    on_89.arch = Arch::sm_89;
    EXPECT_FALSE(validate(on_89, Tiling{64, 128, 4, 2, true}, default_limits(Arch::sm_89)).ok) << text;
    EXPECT_FALSE(default_tiling(on_89, default_limits(Arch::sm_89)).wgmma) << text;
  }
  const Spec f16 = parse_spec("prefill qk=int8:per_token pv=fp16 out=fp16 d=128 arch=sm_89");
  const Spec i8 = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 arch=sm_89");
  const Spec f8 = parse_spec("prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=128 arch=sm_89");
  const Tiling t{64, 64, 4, 2};
  EXPECT_EQ(kernel_smem_bytes(f16, t) - kernel_smem_bytes(i8, t), 2 * 64 * 128);   // 2 stages x bn x d more
  EXPECT_EQ(kernel_smem_bytes(f8, t), kernel_smem_bytes(i8, t));
  // d 128, bn 128, 2 stages: 107.5 KiB with fp16 V, over sm_89's 99 KiB (the int8 kernel's 74 KiB fit).
  const Verdict big = validate(f16, Tiling{64, 128, 4, 2}, default_limits(Arch::sm_89));
  EXPECT_FALSE(big.ok);
  EXPECT_NE(big.reason.find("bytes of shared memory"), std::string::npos) << big.reason;
  EXPECT_TRUE(validate(i8, Tiling{64, 128, 4, 2}, default_limits(Arch::sm_89)).ok);
  // The grid has fp16 P·V on every arch and fp8 P·V from sm_89 on.
  for (Arch a : {Arch::sm_80, Arch::sm_89, Arch::sm_90a}) {
    int n16 = 0, n8 = 0;
    for (const Spec& s : gen::default_grid(a)) {
      n16 += s.qk.fmt == Fmt::int8 && s.pv.fmt == Fmt::fp16;
      n8 += s.qk.fmt == Fmt::int8 && s.pv.fmt == Fmt::fp8e4m3;
    }
    EXPECT_GE(n16, 8) << to_string(a);
    EXPECT_EQ(n8 > 0, a != Arch::sm_80) << to_string(a);
  }
}

// Q smoothing (smooth=q...) runs in the mma.sync form only: _wg is refused with a reason and never offered,
// also where the wgmma form is otherwise preferred (sm_90a); the extra shared memory is counted.
TEST(Validate, QSmoothingRefusesWgmma) {
  for (const char* text : {"prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal smooth=qkv arch=sm_90a",
                           "prefill qk=int8:per_block pv=int8:per_tensor out=bf16 d=64 smooth=qk arch=sm_90a",
                           "prefill qk=int8:per_tensor pv=int8:per_tensor out=fp16 d=256 smooth=q arch=sm_90a"}) {
    const Spec s = parse_spec(text);
    const DeviceLimits lim = default_limits(s.arch);
    const Verdict v = validate(s, Tiling{64, 128, 4, 2, true}, lim);
    EXPECT_FALSE(v.ok) << text;
    EXPECT_NE(v.reason.find("mma.sync form only; drop _wg"), std::string::npos) << v.reason;
    const auto c = gen::candidate_tilings(s, lim);
    EXPECT_FALSE(c.empty()) << text;
    for (const Tiling& t : c) EXPECT_FALSE(t.wgmma) << text << " " << to_string(t);
    Spec plain = s;
    plain.smooth &= ~kSmoothQ;
    const Tiling t = c.front();
    // The tilings whose Q-smoothing form spills are refused for it, not for the kernel without it.
    if (s.head_dim == 128) {
      EXPECT_FALSE(validate(s, Tiling{64, 64, 4, 3}, lim).ok);
      EXPECT_TRUE(validate(plain, Tiling{64, 64, 4, 3}, lim).ok);
    }
    EXPECT_EQ(kernel_smem_bytes(s, t) - kernel_smem_bytes(plain, t),
              prefill_int8::qsmooth_bytes(s.head_dim, t.block_m, t.block_n)) << text;
  }
}

// _mb<k> asks for k resident blocks; refused when k blocks cannot share the SM.
TEST(Validate, MinBlocksMustFitTheSm) {
  const Spec s = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 smooth=kv arch=sm_90a");
  const DeviceLimits lim = default_limits(Arch::sm_90a);
  EXPECT_TRUE(validate(s, Tiling{64, 128, 4, 3, true, 4}, lim).ok);   // 4 x (54784 + 1024) bytes <= 228 KB
  const Verdict v = validate(s, Tiling{64, 128, 4, 3, true, 5}, lim);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("holds at most 4"), std::string::npos) << v.reason;
  EXPECT_FALSE(validate(s, Tiling{128, 128, 8, 2, true, 9}, lim).ok);   // 9 x 256 threads > 2048
  const Tiling d = default_tiling(s, lim);
  EXPECT_EQ(d, (Tiling{64, 128, 4, 3, true, 4})) << to_string(d);
}

TEST(Validate, EveryGridPointHasCandidatesOnEveryArch) {
  for (Arch a : {Arch::sm_80, Arch::sm_86, Arch::sm_89, Arch::sm_90, Arch::sm_90a})
    for (const Spec& s : gen::default_grid(a)) {
      EXPECT_TRUE(validate(s).ok) << to_string(s) << ": " << validate(s).reason;
      const auto c = gen::candidate_tilings(s, default_limits(a));
      EXPECT_FALSE(c.empty()) << to_string(s);
      for (const Tiling& t : c) EXPECT_LE(kernel_smem_bytes(s, t), default_limits(a).max_smem_per_block);
    }
}

TEST(Validate, DecodeTilingsAndProblems) {
  const Spec s = parse_spec("decode qk=int4:per_token pv=int4:per_token out=bf16 d=128 gqa=4 arch=sm_90a");
  const DeviceLimits lim = default_limits(s.arch);
  EXPECT_TRUE(validate(s, Tiling{16, 32, 4, 2}, lim).ok);
  Verdict v = validate(s, Tiling{64, 32, 4, 2}, lim);   // bm 64: too many registers
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("decode_shape.h"), std::string::npos) << v.reason;
  v = validate(s, Tiling{16, 32, 4, 2, true}, lim);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("int8 prefill kernel only"), std::string::npos) << v.reason;
  EXPECT_TRUE(validate(s, parse_problem("b=8,hq=32,hkv=8,q=16,kv=16")).ok);
  v = validate(s, parse_problem("b=8,hq=32,hkv=8,q=17,kv=16"));
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("kv must be >= q"), std::string::npos) << v.reason;
  EXPECT_FALSE(validate(s, parse_problem("b=1,hq=32,hkv=8,q=65,kv=4096")).ok);
  // Every decode candidate fits the smallest shared memory (sm_86 / sm_89: 99 KiB) it is listed for.
  for (Arch a : {Arch::sm_80, Arch::sm_89, Arch::sm_90a}) {
    Spec t = s;
    t.arch = a;
    for (const Tiling& c : gen::candidate_tilings(t, default_limits(a))) EXPECT_TRUE(validate(t, c, default_limits(a)).ok);
  }
}

TEST(Validate, ProblemMustMatchGqa) {
  const Spec s = parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=128 gqa=4");
  EXPECT_TRUE(validate(s, parse_problem("b=2,hq=32,hkv=8,q=100,kv=300")).ok);
  const Verdict v = validate(s, parse_problem("b=2,hq=32,hkv=32,q=100"));
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("hq = gqa * hkv"), std::string::npos);
}

// Every kernel's grid has heads and batch in y and z, which CUDA caps at 65535.
TEST(Validate, ProblemMustFitTheLaunchGrid) {
  const Spec s = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 smooth=kv");
  EXPECT_TRUE(validate(s, parse_problem("b=65535,hq=2,hkv=2,q=1")).ok);
  for (const char* shape : {"b=65536,hq=2,hkv=2,q=1", "b=1,hq=65536,hkv=65536,q=1"}) {
    const Verdict v = validate(s, parse_problem(shape));
    EXPECT_FALSE(v.ok) << shape;
    EXPECT_NE(v.reason.find("accepted: b <= 65535 and hq <= 65535"), std::string::npos) << v.reason;
  }
}

TEST(Problem, TextRoundTripAndErrors) {
  const Problem p = parse_problem("b=3,hq=16,hkv=4,q=17,kv=4097");
  EXPECT_EQ(to_string(p), "b=3,hq=16,hkv=4,q=17,kv=4097");
  EXPECT_EQ(parse_problem("q=100").kv_len, 100);
  EXPECT_THROW(parse_problem("b=0"), std::exception);
  EXPECT_THROW(parse_problem("x=3"), std::exception);
  EXPECT_DOUBLE_EQ(attention_flops(parse_problem("b=1,hq=2,hkv=2,q=10,kv=10"), 64, true), 4.0 * 2 * 100 * 64 / 2);
}

// qk=fp8e4m3 runs on the wgmma form only: its candidates are all _wg (and _tma / _ws forms of them); the
// mma.sync shapes are refused with the reason; attention() launches the fused-Q twin (e4m3 Q codes in the
// kernel's prologue) where the granularity is token-local.
TEST(Validate, Fp8QkTakesTheWgmmaFormOnly) {
  const Spec s = parse_spec("prefill qk=fp8e4m3:per_token pv=fp8e4m3:per_channel out=fp16 d=128 causal arch=sm_90a");
  const DeviceLimits lim = default_limits(Arch::sm_90a);
  const std::vector<Tiling> c = gen::candidate_tilings(s, lim);
  ASSERT_FALSE(c.empty());
  EXPECT_TRUE(default_tiling(s, lim).wgmma);
  bool ws = false;
  for (const Tiling& t : c) {
    EXPECT_TRUE(t.wgmma) << to_string(t);
    EXPECT_FALSE(t.q_fused) << to_string(t);
    ws |= t.warp_specialized;
  }
  EXPECT_TRUE(ws) << "the warp-specialized forms are candidates too";
  const Verdict v = validate(s, Tiling{64, 128, 4, 2}, lim);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("add _wg"), std::string::npos) << v.reason;
  Tiling qf = default_tiling(s, lim);
  qf.q_fused = true;
  EXPECT_TRUE(validate(s, qf, lim)) << validate(s, qf, lim).reason;
  EXPECT_EQ(fused_q_form(s, default_tiling(s, lim), lim), qf);
  Spec per_tensor = s;
  per_tensor.qk.gran = Gran::per_tensor;   // statistics of the whole tensor: the Q pass stays
  EXPECT_FALSE(fused_q_form(per_tensor, default_tiling(per_tensor, lim), lim).q_fused);
}

}  // namespace
}  // namespace qattn

// No default tiling spills: NVRTC compiles (no GPU) of a seeded sample of the validate()-accepted spec
// space (generator/spec_space.hpp), two distinct kernels per (arch, phase, head dim), plus points that
// once spilled; each must build with 0 bytes of spill stores. The full space is
// `qattn compile --grid space` (docs/testing.md).
#include <gtest/gtest.h>

#include <cstdio>

#include "generator/spec_space.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/validate.hpp"
#include "tests/common/compile_all.hpp"

namespace qattn {
namespace {

constexpr uint64_t kSeed = 20261127;
constexpr size_t kPerStratum = 2;   // ~75 kernels: 1-2 s of NVRTC each, under 3 minutes on 2 cores

// Default tilings that spilled before the choice in generator/search_space.cpp was changed for them.
const char* const kOnceSpilled[] = {
    "prefill qk=fp16 pv=fp16 out=fp16 d=64 arch=sm_80",
    // GEMV decode (bench/results/2026-11-28_spill_sweep_decode/, 2026-12-06_spill_sweep_decode_sm86/): a
    // repaired row of each arch and format family, and sm_90a's rules.
    "decode qk=fp16 pv=fp16 out=fp16 d=64 gqa=4 paged flow=gemv arch=sm_80",
    "decode qk=int4:per_token pv=int4:per_token out=bf16 d=128 gqa=2 softmax=sas paged flow=gemv arch=sm_80",
    "decode qk=fp16 pv=fp16 out=fp16 d=256 causal gqa=2 paged flow=gemv arch=sm_89",
    "decode qk=flashq:per_channel pv=flashq:per_channel out=fp16 d=256 flow=gemv arch=sm_89",
    "decode qk=fp16 pv=fp16 out=fp16 d=256 causal gqa=2 paged flow=gemv arch=sm_86",
    "decode qk=int4:per_group pv=int4:per_group out=fp16 d=256 gqa=8 paged flow=gemv arch=sm_86",
    "decode qk=fp16 pv=fp16 out=fp16 d=128 gqa=2 softmax=unified_max paged flow=gemv arch=sm_90a",
    "decode qk=fp16 pv=fp16 out=fp16 d=64 causal gqa=8 flow=gemv arch=sm_90a",
};

std::vector<std::pair<Spec, Tiling>> sampled_points() {
  std::vector<std::pair<Spec, Tiling>> points;
  for (const char* text : kOnceSpilled) {
    const Spec s = parse_spec(text);
    points.emplace_back(s, default_tiling(s, default_limits(s.arch)));
  }
  for (Arch arch : {Arch::sm_80, Arch::sm_86, Arch::sm_89, Arch::sm_90, Arch::sm_90a})
    for (Phase phase : {Phase::prefill, Phase::decode}) {
      const std::vector<gen::SpacePoint> kernels = gen::distinct_default_kernels(gen::accepted_specs(phase, arch));
      for (int d : {64, 96, 128, 256}) {
        std::vector<gen::SpacePoint> of_d;
        for (const gen::SpacePoint& p : kernels)
          if (p.spec.head_dim == d) of_d.push_back(p);
        for (const gen::SpacePoint& p : gen::sample_points(of_d, kPerStratum, kSeed + d))
          points.emplace_back(p.spec, p.tiling);
      }
    }
  return points;
}

TEST(SpillSample, DefaultTilingsOfSampledAcceptedSpecsDoNotSpill) {
  const std::vector<std::pair<Spec, Tiling>> points = sampled_points();
  ASSERT_GE(points.size(), 5u * (4 + 3) * kPerStratum);   // every arch, phase and head dim was sampled
  RuntimeOptions o;
  o.use_cache = false;
  Runtime rt(o);
  const std::vector<test::CompileOutcome> done = test::compile_all(rt, points);
  int spilled = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    const std::string name = kernel_name(points[i].first, points[i].second);
    const CompiledKernel& k = done[i].kernel;
    std::printf("[ kernel ] %s  regs %d  spills %d  (%s)\n", name.c_str(), k.registers, k.spill_bytes,
                to_string(points[i].first).c_str());
    EXPECT_EQ(done[i].error, "") << name;
    EXPECT_EQ(k.spill_bytes, 0) << name << " (" << to_string(points[i].first) << ")";
    spilled += k.spill_bytes > 0;
  }
  std::printf("[ sampled ] %zu kernels, %d spilled\n", points.size(), spilled);
}

}  // namespace
}  // namespace qattn

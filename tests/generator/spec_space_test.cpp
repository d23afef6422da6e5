// The enumerated spec space (generator/spec_space.hpp): only accepted specs, each once, every head dim
// and format family of each phase, pruning that loses nothing, and a seeded sample that repeats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "generator/search_space.hpp"
#include "generator/spec_schema.hpp"
#include "generator/spec_space.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/validate.hpp"

namespace qattn {
namespace {

TEST(SpecSpace, EverySpecIsAcceptedAndListedOnce) {
  for (Phase phase : {Phase::prefill, Phase::decode})
    for (Arch arch : {Arch::sm_80, Arch::sm_90a}) {
      const std::vector<Spec> specs = gen::accepted_specs(phase, arch);
      std::set<std::string> texts;
      std::set<int> dims;
      std::set<int> qk_fmts;
      for (const Spec& s : specs) {
        EXPECT_TRUE(validate(s)) << to_string(s);
        EXPECT_EQ(s.phase, phase);
        EXPECT_EQ(s.arch, arch);
        EXPECT_TRUE(texts.insert(to_string(s)).second) << to_string(s);
        dims.insert(s.head_dim);
        qk_fmts.insert(static_cast<int>(s.qk.fmt));
      }
      const std::set<int> want = phase == Phase::prefill ? std::set<int>{64, 96, 128, 256} : std::set<int>{64, 128, 256};
      EXPECT_EQ(dims, want);
      // prefill: fp16, bf16, int8, int4, and fp8e4m3 on sm_90a (the wgmma kernel) only.
      const size_t prefill_fmts = arch == Arch::sm_90a ? 5u : 4u;
      EXPECT_EQ(qk_fmts.size(), phase == Phase::prefill ? prefill_fmts : 6u) << to_string(phase) << " " << to_string(arch);
      EXPECT_EQ(specs, gen::accepted_specs(phase, arch));   // deterministic
    }
}

TEST(SpecSpace, KnownPointsAreInTheSpace) {
  for (const char* text : {"prefill qk=fp16 pv=fp16 out=fp16 d=64 arch=sm_80",
                           "prefill qk=int4:per_warp pv=fp8e4m3:per_channel out=bf16 d=256 causal smooth=qkv arch=sm_89",
                           "decode qk=flashq:per_channel pv=flashq:per_channel out=fp16 d=64 gqa=8 softmax=sas paged flow=gemv arch=sm_90a"}) {
    const Spec want = parse_spec(text);
    bool found = false;
    for (const Spec& s : gen::accepted_specs(want.phase, want.arch)) found = found || s == want;
    EXPECT_TRUE(found) << text;
  }
}

// The unpruned product over a slice of the space (two Q/K formats, both P/V and output formats of
// the slice, three head dims, every other field's values) holds exactly the enumerated specs of the slice.
TEST(SpecSpace, PruningLosesNoAcceptedSpec) {
  const auto& fields = gen::schema::fields();
  for (Phase phase : {Phase::prefill, Phase::decode, Phase::linear}) {
    const Arch arch = Arch::sm_89;
    std::set<std::string> enumerated;
    const std::vector<Operand> slice = {{Fmt::int8, Gran::per_token}, {Fmt::fp8e4m3, Gran::per_channel},
                                        {Fmt::fp16, Gran::none}, {Fmt::fp8e4m3, Gran::per_head}};
    auto in_slice = [&](const Spec& s) {
      if (s.phase == Phase::linear) return true;   // every format at one layer shape
      bool qk = false, pv = false;
      for (const Operand& o : slice) qk = qk || s.qk == o, pv = pv || s.pv == o;
      return qk && pv && (s.head_dim == 64 || s.head_dim == 96 || s.head_dim == 128) && s.gqa <= 2;
    };
    for (const Spec& s : gen::accepted_specs(phase, arch))
      if (in_slice(s)) enumerated.insert(to_string(s));
    std::set<std::string> product;
    Spec spec;
    spec.phase = phase;
    spec.arch = arch;
    if (phase == Phase::linear) spec.n = spec.k = 4096;
    std::function<void(size_t)> walk = [&](size_t i) {
      if (i == fields.size()) {
        if (validate(spec) && in_slice(spec)) product.insert(to_string(spec));
        return;
      }
      const gen::schema::Field& f = fields[i];
      if (!std::strcmp(f.key, "phase") || !std::strcmp(f.key, "arch")) return walk(i + 1);   // fixed
      if (!gen::schema::in_phase(f, phase)) return walk(i + 1);   // the other family's field: its default
      if (!std::strcmp(f.key, "n") || !std::strcmp(f.key, "k")) return walk(i + 1);   // 4096, as enumerated
      std::vector<int> values = gen::schema::domain_values(f);
      if (!std::strcmp(f.key, "d")) values = {64, 96, 100, 128};
      if (!std::strcmp(f.key, "gqa")) values = {1, 2};
      if (!std::strcmp(f.key, "splitk")) values = {0};
      if (!std::strcmp(f.key, "qk") || !std::strcmp(f.key, "pv")) {
        values.clear();
        for (const Operand& o : slice) values.push_back(static_cast<int>(o.fmt) * 16 + static_cast<int>(o.gran));
      }
      for (int x : values) {
        f.set(spec, x);
        walk(i + 1);
      }
      f.set(spec, f.fallback);
    };
    walk(0);
    EXPECT_FALSE(product.empty());
    EXPECT_EQ(enumerated, product) << to_string(phase);
  }
}

TEST(SpecSpace, DistinctKernelsAndSeededSamples) {
  const std::vector<Spec> specs = gen::accepted_specs(Phase::decode, Arch::sm_80);
  const std::vector<gen::SpacePoint> kernels = gen::distinct_default_kernels(specs);
  ASSERT_FALSE(kernels.empty());
  EXPECT_LT(kernels.size(), specs.size());   // gqa 2 and 16 share the mma decode kernels of gqa 1
  std::set<std::string> names;
  for (const gen::SpacePoint& p : kernels) EXPECT_TRUE(names.insert(p.kernel).second) << p.kernel;
  const auto a = gen::sample_points(kernels, 10, 7), b = gen::sample_points(kernels, 10, 7),
             c = gen::sample_points(kernels, 10, 8);
  ASSERT_EQ(a.size(), 10u);
  std::vector<std::string> na, nb, nc;
  for (size_t i = 0; i < 10; ++i) na.push_back(a[i].kernel), nb.push_back(b[i].kernel), nc.push_back(c[i].kernel);
  EXPECT_EQ(na, nb);
  EXPECT_NE(na, nc);
  EXPECT_EQ(std::set<std::string>(na.begin(), na.end()).size(), 10u);   // without replacement
  EXPECT_EQ(gen::sample_points(kernels, kernels.size() + 5, 1).size(), kernels.size());
}

// generator/spill_promotions.inc (the spill sweep's repairs) is read, and complete: every row names
// accepted specs, which default to the row's tiling; and no accepted sm_80 / sm_86 / sm_89 decode spec defaults
// to a kernel a row says spilled, under any name (specs that share a kernel, e.g. gqa 16 with gqa 8's
// GEMV rows, need a row each; `qattn compile --grid space --repair` prints them).
TEST(SpecSpace, RepairedKernelsAreNoSpecsDefault) {
  std::map<std::string, const gen::SpillPromotion*> rows;
  for (const gen::SpillPromotion& p : gen::spill_promotions()) rows[p.stem] = &p;
  ASSERT_FALSE(rows.empty());
  std::set<std::string> seen;
  for (Arch arch : {Arch::sm_80, Arch::sm_86, Arch::sm_89}) {
    const std::vector<Spec> specs = gen::accepted_specs(Phase::decode, arch);
    std::map<std::string, std::string> spilled;   // kernel code -> the row's tiling
    std::vector<Tiling> defaults;
    for (const Spec& s : specs) {
      defaults.push_back(default_tiling(s, default_limits(arch)));
      const auto row = rows.find(spec_name(s));
      if (row == rows.end()) continue;
      seen.insert(row->first);
      EXPECT_EQ(to_string(defaults.back()), row->second->tiling) << to_string(s);
      spilled[gen::kernel_code(s, parse_tiling(row->second->spilled))] = row->second->tiling;
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      const auto hit = spilled.find(gen::kernel_code(specs[i], defaults[i]));
      if (hit == spilled.end()) continue;
      ADD_FAILURE() << to_string(specs[i]) << " defaults to a kernel that spilled; its row: {\""
                    << spec_name(specs[i]) << "\", \"" << hit->second << "\", \"" << to_string(defaults[i])
                    << "\"},";
    }
  }
  for (const auto& [stem, row] : rows) EXPECT_TRUE(seen.count(stem)) << stem << " matches no accepted spec";
}

// What a decode call launches untuned: the default (so every repair and rule, including those that move
// bm) when the rows are the spec's, and a tiling whose bm holds more rows (q_len > 1) otherwise.
TEST(SpecSpace, DecodeCallsLaunchTheDefaultAtOneQueryToken) {
  int moved = 0;
  for (Arch arch : {Arch::sm_80, Arch::sm_86, Arch::sm_89, Arch::sm_90, Arch::sm_90a}) {
    const DeviceLimits limits = default_limits(arch);
    for (const Spec& s : gen::accepted_specs(Phase::decode, arch)) {
      const Tiling def = default_tiling(s, limits);
      const Tiling one = gen::decode_tiling(s, s.gqa, limits);
      EXPECT_EQ(to_string(one), to_string(def)) << to_string(s);
      if (s.flow == Dataflow::gemv && def.block_m < s.gqa) ++moved;
      const Tiling four = gen::decode_tiling(s, 4 * s.gqa, limits);
      EXPECT_TRUE(validate(s, four, limits)) << to_string(s);
      if (s.flow == Dataflow::gemv && four.block_m != def.block_m) {
        EXPECT_GE(four.block_m, std::min(4 * s.gqa, 8)) << to_string(s);
      }
    }
  }
  EXPECT_GT(moved, 0) << "no repair moved bm below the GQA rows: the test no longer covers that case";
}

}  // namespace
}  // namespace qattn

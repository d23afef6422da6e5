// NVRTC compile of every prefill qk=int4 point (granularity x d x mask) for sm_80, sm_89 and sm_90a,
// no GPU needed, and no ptxas spill stores: the packed-int4 form (_i4mma) on sm_80 / sm_89 (their
// default) with every candidate tiling the search space offers there, the int8-compute form's default
// tiling (wgmma) on sm_90a, and the packed form forced on sm_90a (what the H100 test runs to check its
// correctness). Then the helper kernels of each point (its quantizers,
// the packed ones included).
// The Q/K granularity changes only the quantization passes and the kernel's name, not its body: the
// attention kernels are compiled once per distinct template instantiation, and checked for every
// point that instantiates it.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>

#include "qattn/kernel_name.hpp"
#include "generator/render.hpp"
#include "qattn/runtime.hpp"
#include "generator/search_space.hpp"
#include "qattn/validate.hpp"
#include "tests/common/compile_all.hpp"
#include "tests/common/compile_helpers.hpp"

namespace qattn {
namespace {

const Gran kGrans[] = {Gran::per_tensor, Gran::per_block, Gran::per_warp, Gran::per_thread, Gran::per_token};

std::vector<Spec> int4_points(Arch arch) {
  std::vector<Spec> out;
  for (Gran g : kGrans)
    for (int d : {64, 96, 128, 256})
      for (bool causal : {false, true}) {
        Spec s;
        s.qk = {Fmt::int4, g};
        s.pv = {Fmt::int8, Gran::per_channel};
        s.out = d == 96 ? Fmt::bf16 : Fmt::fp16;
        s.head_dim = d;
        s.causal = causal;
        s.smooth = kSmoothK | kSmoothV;
        s.arch = arch;
        out.push_back(s);
      }
  return out;
}

// What a point compiles to: the rendered kernel configuration (Kernel<qattn_config> runs it).
std::string body_of(const Spec& s, const Tiling& t) {
  const std::string text = gen::render_kernel(s, t).text;
  const size_t at = text.find("struct qattn_config");
  return text.substr(at, text.find("};", at) - at);
}

class Int4CompileGrid : public ::testing::TestWithParam<Arch> {};

TEST_P(Int4CompileGrid, EveryPointAndCandidateCompilesWithoutSpills) {
  const Arch arch = GetParam();
  const DeviceLimits lim = default_limits(arch);
  // (spec, tiling) per distinct body; every point's tilings map onto them.
  std::map<std::string, std::pair<Spec, Tiling>> bodies;
  std::map<std::string, std::vector<std::string>> users;
  size_t points = 0;
  for (const Spec& s : int4_points(arch)) {
    std::vector<Tiling> tilings = gen::candidate_tilings(s, lim);
    ASSERT_FALSE(tilings.empty()) << to_string(s);
    EXPECT_EQ(tilings.front().int4_mma, arch != Arch::sm_90a) << to_string(s);
    // Level 1: sm_89 compiles its default tilings only (its candidates are sm_80's, compiled in full there).
    if (arch == Arch::sm_89 && test::test_level() < 2) tilings.resize(1);
    if (arch == Arch::sm_90a) {
      // The int8-compute form is the int8 kernel: its default tiling here (the int8 candidates are the
      // int8 grid's business: two of them spill 4 bytes on sm_90a), then the packed form, forced: what
      // the H100 checks for correctness.
      tilings.resize(1);
      Tiling forced = gen::candidate_tilings([&] { Spec s89 = s; s89.arch = Arch::sm_89; return s89; }(), default_limits(Arch::sm_89)).front();
      ASSERT_TRUE(validate(s, forced, lim)) << to_string(forced);
      tilings.push_back(forced);
    }
    for (const Tiling& t : tilings) {
      const std::string b = body_of(s, t);
      bodies.emplace(b, std::make_pair(s, t));
      users[b].push_back(kernel_name(s, t));
      ++points;
    }
  }
  RuntimeOptions o;
  o.use_cache = false;
  Runtime rt(o);
  std::vector<std::string> keys;
  std::vector<std::pair<Spec, Tiling>> work;
  for (const auto& [body, point] : bodies) keys.push_back(body), work.push_back(point);
  const std::vector<test::CompileOutcome> done = test::compile_all(rt, work);
  for (size_t i = 0; i < work.size(); ++i) {
    const CompiledKernel& k = done[i].kernel;
    const std::string& name = k.kernel_name.empty() ? keys[i] : k.kernel_name;
    EXPECT_EQ(done[i].error, "") << name;
    EXPECT_FALSE(k.cubin.empty()) << name;
    EXPECT_GT(k.registers, 0) << name;
    EXPECT_LE(k.registers, 255) << name;
    EXPECT_EQ(k.spill_bytes, 0) << name << " (and " << users[keys[i]].size() - 1 << " more points)";
  }
  std::printf("[ compiled ] %zu int4 points / tilings as %zu distinct kernels for %s\n", points, work.size(), to_string(arch));
}

TEST_P(Int4CompileGrid, EveryHelperKernelCompiles) {
  const test::HelperCompiles h = test::compile_distinct_helpers(int4_points(GetParam()));
  test::expect_compiled(h, false);
  // The packed quantizers (_i4p) serve Q and K on the archs whose default is the packed form.
  bool packed = false;
  for (const gen::Source& src : h.sources) packed |= src.kernel_name.find("_i4p") != std::string::npos;
  EXPECT_EQ(packed, int4_mma_by_default(GetParam()));
  std::printf("[ compiled ] %zu helper kernels for %s\n", h.sources.size(), to_string(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Archs, Int4CompileGrid, ::testing::Values(Arch::sm_80, Arch::sm_89, Arch::sm_90a),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace qattn

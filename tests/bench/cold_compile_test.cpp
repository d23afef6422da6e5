// The start-up benchmark's cold-compile phase (bench/cold_compile.hpp) on the CPU: every variant it
// times must be a real compile, never a cache answer.
#include <gtest/gtest.h>

#include <set>

#include "bench/cold_compile.hpp"
#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"

namespace qattn::bench {
namespace {

// Three small kernels of different families: enough to see the counter move once per variant.
std::vector<Variant> small_variants() {
  std::vector<Variant> out;
  for (const char* text : {"prefill qk=fp16 pv=fp16 out=fp16 d=64 arch=sm_80",
                           "prefill qk=int8:per_block pv=int8:per_tensor out=bf16 d=64 smooth=k arch=sm_89",
                           "decode qk=int8:per_token pv=int8:per_token out=fp16 d=64 gqa=4 arch=sm_90a"}) {
    const Spec s = parse_spec(text);
    out.emplace_back(s, default_tiling(s, default_limits(s.arch)));
  }
  return out;
}

TEST(ColdCompilePhase, CompilesEachVariantOnce) {
  const std::vector<Variant> variants = small_variants();
  // The same variant twice in one process: a cache in between (the runtime's, NVRTC's) would show here.
  std::vector<Variant> twice = variants;
  twice.push_back(variants.front());
  const std::vector<ColdCompileSample> samples = cold_compile_phase(twice);
  ASSERT_EQ(samples.size(), twice.size());
  long long compiles = 0;
  std::set<std::string> names;
  for (const ColdCompileSample& s : samples) {
    SCOPED_TRACE(s.kernel_name);
    compiles += s.compiles;
    names.insert(s.kernel_name);
    EXPECT_TRUE(s.ptxas_ran);
    EXPECT_GT(s.registers, 0);
    EXPECT_GE(s.spill_bytes, 0);   // known: only a ptxas report gives it
    EXPECT_GT(s.cubin_bytes, 0u);
    EXPECT_GT(s.wall_ms, 0.0);
    EXPECT_GT(s.user_ms + s.sys_ms, 0.0);
  }
  EXPECT_EQ(compiles, static_cast<long long>(twice.size()));
  EXPECT_EQ(names.size(), variants.size());
  EXPECT_EQ(cold_phase_problem(samples), "");
}

TEST(ColdCompilePhase, NamesASampleThatWasNotCompiled) {
  ColdCompileSample served;
  served.kernel_name = "k";
  served.compiles = 1;
  served.ptxas_ran = false;   // what a compile answered from NVRTC's cache looks like
  EXPECT_NE(cold_phase_problem({served}).find("k: no ptxas report"), std::string::npos);
  served.ptxas_ran = true;
  served.compiles = 0;        // what a binary-cache hit looks like
  EXPECT_NE(cold_phase_problem({served}).find("moved by 0"), std::string::npos);
}

TEST(ColdCompilePhase, MeasuredVariantsAreValidAndDistinct) {
  const std::vector<Variant> variants = cold_compile_variants(QATTN_SOURCE_DIR "/bench/cold_compile_specs.txt", Arch::sm_90a);
  EXPECT_GE(variants.size(), 10u);
  std::set<std::string> names;
  bool flashq = false;
  for (const Variant& v : variants) {
    EXPECT_TRUE(validate(v.first, v.second, default_limits(Arch::sm_90a))) << to_string(v.first);
    names.insert(kernel_name(v.first, v.second));
    flashq = flashq || to_string(v.first).find("flashq") != std::string::npos;
  }
  EXPECT_EQ(names.size(), variants.size());
  EXPECT_TRUE(flashq);
}

TEST(ColdCompilePhase, AnUnreadableSpecListIsBadInput) {
  try {
    cold_compile_variants("/nonexistent/specs.txt", Arch::sm_90a);
    FAIL() << "an unreadable list was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/specs.txt"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qattn::bench

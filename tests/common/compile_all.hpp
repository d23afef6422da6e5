// NVRTC compiles of many (spec, tiling) points on a bounded pool of threads (one per core: each NVRTC
// instance takes a core and a few hundred MB), for the compile-grid tests. Header-only: those tests
// link the runtime (qattn/runtime.hpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "qattn/kernel_name.hpp"
#include "qattn/runtime.hpp"

namespace qattn::test {

struct CompileOutcome {
  CompiledKernel kernel;   // empty cubin when it threw
  std::string error;       // what() of the exception, "" when it compiled
};

inline std::vector<CompileOutcome> compile_all(Runtime& runtime, const std::vector<std::pair<Spec, Tiling>>& points) {
  std::vector<CompileOutcome> out(points.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < std::max(1u, std::thread::hardware_concurrency()); ++w)
    pool.emplace_back([&] {
      for (size_t i = next++; i < points.size(); i = next++) {
        try {
          out[i].kernel = runtime.compile(points[i].first, points[i].second);
        } catch (const std::exception& e) {
          out[i].error = e.what();
        }
      }
    });
  for (auto& t : pool) t.join();
  return out;
}

// Compiles every point with a runtime of its own that uses no cache file (every point really compiles).
inline std::vector<CompileOutcome> compile_uncached(const std::vector<std::pair<Spec, Tiling>>& points) {
  RuntimeOptions o;
  o.use_cache = false;
  Runtime rt(o);
  return compile_all(rt, points);
}

// Compiles every point (no cache) and expects each to build within the register file without ptxas
// spill stores; prints the kernels whose wgmma pipeline ptxas serialized (a possible slowdown, not an
// error: see CompiledKernel::wgmma_serialized); returns how many were compiled.
inline size_t expect_compiled_without_spills(const std::vector<std::pair<Spec, Tiling>>& points) {
  const std::vector<CompileOutcome> done = compile_uncached(points);
  for (size_t i = 0; i < points.size(); ++i) {
    const std::string name = kernel_name(points[i].first, points[i].second);
    EXPECT_EQ(done[i].error, "") << name;
    EXPECT_FALSE(done[i].kernel.cubin.empty()) << name;
    EXPECT_LE(done[i].kernel.registers, 255) << name;
    EXPECT_EQ(done[i].kernel.spill_bytes, 0) << name;
    if (done[i].kernel.wgmma_serialized) std::printf("[ serialized ] %s: wgmma pipeline\n", name.c_str());
  }
  return points.size();
}

// Compiles every point (no cache) and expects each to build without spill stores, with a ptxas report,
// and with its wgmma pipeline intact (ptxas did not serialize it).
inline void expect_compiled_with_wgmma_pipeline(const std::vector<std::pair<Spec, Tiling>>& points) {
  const std::vector<CompileOutcome> done = compile_uncached(points);
  for (size_t i = 0; i < points.size(); ++i) {
    const std::string name = kernel_name(points[i].first, points[i].second);
    ASSERT_EQ(done[i].error, "") << name;
    ASSERT_NE(done[i].kernel.log.find("ptxas info"), std::string::npos) << name << ": no ptxas report to read";
    EXPECT_EQ(done[i].kernel.spill_bytes, 0) << name;
    EXPECT_FALSE(done[i].kernel.wgmma_serialized) << name << ": ptxas serialized its wgmma pipeline";
  }
}

}  // namespace qattn::test

// NVRTC compiles of many (spec, tiling) points on a bounded pool of threads (one per core: each NVRTC
// instance takes a core and a few hundred MB), each distinct kernel body once, for the compile-grid
// tests. Header-only: those tests link the runtime (qattn/runtime.hpp) and the generator.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "generator/render.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/runtime.hpp"

namespace qattn::test {

// QATTN_TEST_LEVEL (CMakeLists.txt): 0 quick, 1 CI (sampled compile grids), 2 the full sweep.
inline int test_level() {
  const char* s = std::getenv("QATTN_TEST_LEVEL");
  return s ? std::atoi(s) : 1;
}

struct CompileOutcome {
  CompiledKernel kernel;   // empty cubin when it threw
  std::string error;       // what() of the exception, "" when it compiled
};

// The rendered source less what only names the kernel (its first comment line and its symbol): points
// with the same body compile to the same machine code (e.g. Q/K per_token and per_thread, whose scales
// the quantizer expands per row). A point that does not render gets a key of its own.
inline std::string kernel_body(const Spec& spec, const Tiling& tiling, size_t index) {
  try {
    std::string text = gen::render_kernel(spec, tiling).text;
    if (text.rfind("// qattn generated:", 0) == 0) text.erase(0, text.find('\n') + 1);
    const std::string name = kernel_name(spec, tiling);
    for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at)) text.replace(at, name.size(), "K");
    return text;
  } catch (const std::exception&) {
    return "unrendered " + std::to_string(index);
  }
}

// Each distinct kernel body is compiled once (on a pool of one thread per core); every point gets its
// body's outcome under its own name.
inline std::vector<CompileOutcome> compile_all(Runtime& runtime, const std::vector<std::pair<Spec, Tiling>>& points) {
  std::map<std::string, size_t> first;   // body -> index of the point compiled for it
  std::vector<size_t> source_of(points.size()), distinct;
  for (size_t i = 0; i < points.size(); ++i) {
    const auto [it, fresh] = first.emplace(kernel_body(points[i].first, points[i].second, i), i);
    source_of[i] = it->second;
    if (fresh) distinct.push_back(i);
  }
  std::vector<CompileOutcome> out(points.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < std::max(1u, std::thread::hardware_concurrency()); ++w)
    pool.emplace_back([&] {
      for (size_t j = next++; j < distinct.size(); j = next++) {
        const size_t i = distinct[j];
        try {
          out[i].kernel = runtime.compile(points[i].first, points[i].second);
        } catch (const std::exception& e) {
          out[i].error = e.what();
        }
      }
    });
  for (auto& t : pool) t.join();
  for (size_t i = 0; i < points.size(); ++i)
    if (source_of[i] != i) {
      out[i] = out[source_of[i]];
      if (out[i].error.empty()) out[i].kernel.kernel_name = kernel_name(points[i].first, points[i].second), out[i].kernel.spec = points[i].first;
    }
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

// NVRTC compiles of many (spec, tiling) points on a bounded pool of threads (one per core: each NVRTC
// instance takes a core and a few hundred MB), for the compile-grid tests. Header-only: those tests
// link the runtime (qattn/runtime.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

}  // namespace qattn::test

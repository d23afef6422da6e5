// NVRTC compiles of the helper kernels (quantization passes, the LSE fix, decode's combine / append /
// gather) of many specs, for the compile-grid tests: points share most helpers, so each distinct source
// is compiled once, all of them in parallel (one NVRTC instance per core). No cache is read or written.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "qattn/runtime.hpp"
#include "runtime/calls/helper_kernels.hpp"
#include "runtime/jit/binary_provider.hpp"

namespace qattn::test {

struct HelperCompiles {
  std::vector<gen::Source> sources;      // distinct by kernel name, in first-use order
  std::vector<rt::Binary> binaries;      // one per source
  long long compiles = 0;                // NVRTC compiles that ran
};

inline HelperCompiles compile_distinct_helpers(const std::vector<Spec>& specs) {
  const int k_mean_sample_tokens = RuntimeOptions{}.k_mean_sample_tokens;
  HelperCompiles out;
  std::set<std::string> names;
  for (const Spec& s : specs)
    for (gen::Source& src : rt::helper_sources(s, k_mean_sample_tokens))
      if (names.insert(src.kernel_name).second) out.sources.push_back(std::move(src));
  rt::BinaryProvider compiler(nullptr, false);
  out.binaries = compiler.get(out.sources);
  out.compiles = compiler.compiles();
  return out;
}

}  // namespace qattn::test

// NVRTC compiles of the helper kernels (quantization passes, the LSE fix, decode's combine / append /
// gather) of many specs, for the compile-grid tests: points share most helpers, so each distinct source
// is compiled once, all of them in parallel (one NVRTC instance per core). No cache is read or written.
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "qattn/runtime.hpp"
#include "qattn/validate.hpp"
#include "runtime/calls/helper_kernels.hpp"
#include "runtime/jit/binary_provider.hpp"

namespace qattn::test {

struct HelperCompiles {
  std::vector<gen::Source> sources;      // distinct by kernel name, in first-use order
  std::vector<rt::Binary> binaries;      // one per source
  long long compiles = 0;                // NVRTC compiles that ran
};

// Every spec must pass validate() (a failure names the one that does not).
inline HelperCompiles compile_distinct_helpers(const std::vector<Spec>& specs) {
  const int k_mean_sample_tokens = RuntimeOptions{}.k_mean_sample_tokens;
  HelperCompiles out;
  std::set<std::string> names;
  for (const Spec& s : specs) {
    EXPECT_TRUE(validate(s).ok) << to_string(s);
    for (gen::Source& src : rt::helper_sources(s, k_mean_sample_tokens))
      if (names.insert(src.kernel_name).second) out.sources.push_back(std::move(src));
  }
  rt::BinaryProvider compiler(nullptr, false);
  out.binaries = compiler.get(out.sources);
  out.compiles = compiler.compiles();
  return out;
}

// Each source compiled once, to a cubin, without an error (and, with no_spills, without spilling).
inline void expect_compiled(const HelperCompiles& h, bool no_spills) {
  ASSERT_EQ(h.binaries.size(), h.sources.size());
  EXPECT_EQ(h.compiles, static_cast<long long>(h.sources.size()));
  for (size_t i = 0; i < h.binaries.size(); ++i) {
    EXPECT_EQ(h.binaries[i].error, "") << h.sources[i].kernel_name;
    EXPECT_FALSE(h.binaries[i].cubin.empty()) << h.sources[i].kernel_name;
    if (no_spills) EXPECT_EQ(h.binaries[i].spill_bytes, 0) << h.sources[i].kernel_name;
  }
}

}  // namespace qattn::test

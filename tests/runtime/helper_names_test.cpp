// Every helper kernel the runtime compiles for a spec of the default grid (helper_sources: quantization
// passes, LSE correction, decode's combine, the cache's writer and reader, FlashQ's) has a name in the
// one kernel-name grammar: parse_kernel_name reads it back and it prints back identically.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "qattn/kernel_name.hpp"
#include "generator/search_space.hpp"
#include "runtime/calls/helper_kernels.hpp"

namespace qattn {
namespace {

TEST(HelperNames, EveryHelperOfTheGridParses) {
  std::set<std::string> names;
  std::set<KernelFamily> families;
  for (Arch arch : {Arch::sm_80, Arch::sm_86, Arch::sm_89, Arch::sm_90, Arch::sm_90a})
    for (const Spec& spec : gen::default_grid(arch))
      for (int sample : {0, 1024})
        for (const gen::Source& src : rt::helper_sources(spec, sample)) {
          if (!names.insert(src.kernel_name).second) continue;
          SCOPED_TRACE(src.kernel_name + " (" + to_string(spec) + ")");
          const ParsedKernelName p = parse_kernel_name(src.kernel_name);
          EXPECT_NE(p.family, KernelFamily::attention);
          EXPECT_EQ(helper_kernel_name(p.helper), src.kernel_name);
          families.insert(p.family);
        }
  EXPECT_GT(names.size(), 50u);
  // The grid reaches every helper family.
  EXPECT_EQ(families.size(), 7u);
}

}  // namespace
}  // namespace qattn

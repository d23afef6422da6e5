// The cold-compile phase of the start-up benchmark, on its own so that a CPU test can drive it: each
// variant rendered and compiled (NVRTC front end, NVVM, ptxas) in a fresh runtime with no cache file.
// NVRTC needs no GPU, so neither does this.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "qattn/runtime.hpp"

namespace qattn::bench {

struct ColdCompileSample {
  std::string kernel_name;
  double wall_ms = 0;            // render + compile, as the caller waits for it
  double user_ms = 0, sys_ms = 0;   // this process's CPU time over the same span (NVRTC runs in it)
  long long compiles = 0;        // how far the runtime's compile counter moved: 1 for a real compile
  bool ptxas_ran = false;        // the log holds ptxas's report, which a compile served by a cache lacks
  int registers = -1, spill_bytes = -1;
  size_t cubin_bytes = 0;
};

using Variant = std::pair<Spec, Tiling>;

// One variant, compiled in a runtime of its own with no cache file. Throws qattn::Error when the
// variant does not compile.
ColdCompileSample cold_compile(const Spec& spec, const Tiling& tiling);

// Every variant once, in order.
std::vector<ColdCompileSample> cold_compile_phase(const std::vector<Variant>& variants);

// Empty when every sample was a real compile (one NVRTC compilation, with a ptxas report); otherwise a
// line naming the first that was not.
std::string cold_phase_problem(const std::vector<ColdCompileSample>& samples);

// The measured set: the specs of specs_file (one per line, '#' comments; bench/cold_compile_specs.txt),
// each for arch with its default tiling. Throws qattn::Error (bad input) for an unreadable file or a
// spec that does not parse or validate.
std::vector<Variant> cold_compile_variants(const std::string& specs_file, Arch arch);

}  // namespace qattn::bench

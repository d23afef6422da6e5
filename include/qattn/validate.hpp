// The one answer to "is this supported, and if not, why": used by the CLI, the runtime and the tuner.
#pragma once
#include <string>

#include "qattn/problem.hpp"
#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"

namespace qattn {

struct Verdict {
  bool ok = true;
  std::string reason;   // empty when ok; otherwise what is wrong and what is accepted, one line
  explicit operator bool() const { return ok; }
  static Verdict yes() { return {}; }
  static Verdict no(std::string why) { return {false, std::move(why)}; }
};

// Per-arch resource limits a tiling must fit (the device's own values override these defaults).
struct DeviceLimits {
  int max_smem_per_block = 0;   // opt-in maximum dynamic shared memory per block, bytes
  int max_threads_per_block = 1024;
  int smem_per_sm = 0;                  // shared memory of one SM, bytes
  int smem_reserved_per_block = 1024;   // what the system takes from it for each resident block
  int max_threads_per_sm = 2048;
};
DeviceLimits default_limits(Arch arch);

Verdict validate(const Spec& spec);                                    // the spec alone (arch may be unset)
Verdict validate(const Spec& spec, const Tiling& tiling, const DeviceLimits& limits);   // arch must be set
Verdict validate(const Spec& spec, const Problem& problem);            // sizes fit the spec (heads, gqa)

// Throw qattn::Error(bad_input) with the verdict's reason when it is not ok.
void require(const Verdict& verdict);

// Dynamic shared memory bytes the kernel for (spec, tiling) needs; 0 when the tiling is invalid.
int kernel_smem_bytes(const Spec& spec, const Tiling& tiling);

}  // namespace qattn

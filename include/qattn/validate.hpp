// The one answer to "is this supported, and if not, why": used by the CLI, the runtime and the tuner.
#pragma once
#include <string>

#include "qattn/export.h"
#include "qattn/problem.hpp"
#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"

QATTN_PUBLIC_BEGIN
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
// The tiling used when nothing is tuned (the first candidate of the search space): always valid for a
// valid spec. Runtime::compile(spec, default_tiling(spec, default_limits(spec.arch))) is the compile-only
// call that needs no tuning.
Tiling default_tiling(const Spec& spec, const DeviceLimits& limits);

Verdict validate(const Spec& spec);                                    // the spec alone (arch may be unset)
Verdict validate(const Spec& spec, const Tiling& tiling, const DeviceLimits& limits);   // arch must be set
Verdict validate(const Spec& spec, const Problem& problem);            // sizes fit the spec (heads, gqa)

// Throw qattn::Error(bad_input) with the verdict's reason when it is not ok.
void require(const Verdict& verdict);

// How a supported spec runs when that is not what its text suggests; "" when there is nothing to say.
// Today: prefill qk=int4. Its Q·K^T runs on packed INT4 tensor cores (mma.sync m16n8k64 .s4, tiling
// token _i4mma) by default on sm_80 / sm_86 / sm_89, and as INT8 compute over the same [-7, 7] codes
// stored one per byte on sm_90 / sm_90a, where the s4 mma is emulated and slow; e.g.
//   "qk=int4 on sm_90a runs as int8 compute (INT4 mma.sync is emulated on Hopper); codes stay in [-7,7]".
// The one-argument form describes the arch's default form (what the search space offers); the
// two-argument form describes the given tiling (e.g. _i4mma forced on sm_90, or no _i4mma on sm_89).
// The CLI prints it where it explains a spec, and the runtime logs it once per kernel it prepares.
std::string dispatch_note(const Spec& spec);
std::string dispatch_note(const Spec& spec, const Tiling& tiling);
// Q/K granularities whose Q scales a CTA can compute from its own query tile (the fused-Q form, _qf):
// per_token, per_warp and per_thread (groups inside 32 rows), per_block (64 rows).
bool fused_q_gran(Gran gran);
// `tiling` with q_fused set when the spec and tiling allow it (validate() passes with _qf on `limits`),
// else `tiling` as given: the form the runtime launches unless QATTN_FUSE_Q=0 (docs/environment.md).
Tiling fused_q_form(const Spec& spec, const Tiling& tiling, const DeviceLimits& limits);
// `tiling` with tma set when validate() passes with _tma (quantized prefill, wgmma, d 64 / 128), else as
// given: the form the runtime launches unless QATTN_TMA=0 (docs/environment.md).
Tiling tma_form(const Spec& spec, const Tiling& tiling, const DeviceLimits& limits);

// Whether qk=int4 prefill runs on packed INT4 tensor cores (_i4mma) by default on `arch`.
bool int4_mma_by_default(Arch arch);
// Whether this spec's default form is the packed one: qk=int4 prefill on such an arch, without Q
// smoothing (its ΔS product needs int8 K tiles, so smooth=q runs as int8 compute everywhere).
bool int4_mma_by_default(const Spec& spec);

// Dynamic shared memory bytes the kernel for (spec, tiling) needs; 0 when the tiling is invalid.
int kernel_smem_bytes(const Spec& spec, const Tiling& tiling);

}  // namespace qattn
QATTN_PUBLIC_END

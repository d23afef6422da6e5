// The tuner's view of the GPU: compile candidates in parallel (through the binary cache), check each
// through the accuracy gate (accuracy_gate.hpp), and time it with CUDA events over rotating input buffers.
#pragma once
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "qattn/tuner.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/jit/binary_provider.hpp"
#include "runtime/registry/runtime_impl.hpp"
#include "runtime/tuning/accuracy_gate.hpp"

namespace qattn::rt {

// The check's random data: `outliers` has the outliers of real activations (6 K channels with a +-5..20
// bias, 4 Q channels x10); `plain` keeps the K bias but no large Q channels, where even INT4 Q/K hold
// their floor or come close (the tuner checks every candidate on both).
enum class CheckData { outliers, plain };

// Fresh random Q, K, V of a problem, uploaded in [b, s, h, d] or [b, h, s, d] order, and a poisoned
// output buffer (NaN in fp16 and bf16).
struct DeviceInputs {
  std::vector<float> q, k, v;   // host values as rounded to the element type, [b, h, s, d]
  DeviceBuffer dq, dk, dv, dout;
  TensorView tq, tk, tv, to;
  AttentionCall call(const Spec& spec, const Problem& p) const;
};
DeviceInputs make_check_inputs(const Spec& spec, const Problem& p, unsigned long long seed, bool bhsd_layout, int ordinal,
                               CheckData data = CheckData::outliers);

// A candidate is named by the tiling the tuner stores; what it compiles, verifies and times is that
// tiling's launch form (Runtime::launch_form: the fused-Q / TMA twin attention() launches for it), so a
// tuned time is the time of the kernel that runs.
class GpuCandidateRunner final : public CandidateRunner {
 public:
  explicit GpuCandidateRunner(Runtime::Impl& runtime);
  ~GpuCandidateRunner() override;
  std::vector<std::string> compile(const Spec& spec, const std::vector<Tiling>& tilings) override;
  Verification verify(const Spec& spec, const Tiling& tiling) override;
  std::vector<double> time(const Spec& spec, const Tiling& tiling, const Problem& problem,
                           const TimingOptions& options) override;
  std::string binary_key(const Tiling& tiling) const;

 private:
  Runtime::Impl& rt_;
  std::map<std::string, std::string> keys_;   // tiling text -> binary-cache key
  std::map<std::string, std::vector<DeviceInputs>> inputs_;   // timing inputs per (type, d, problem)
};

// Runs one spec/tiling on make_check_inputs' data and compares with the float64 reference through the
// accuracy gate (accuracy_gate.hpp): the tuner's check of every candidate, also Runtime::check and
// `qattn run`.
struct CheckResult {
  bool passed = false;
  double cosine = 0, rel_l2 = 0, max_abs = 0;   // the kernel against exact attention
  long long non_finite = 0;
  // The format's own numerics against exact attention on the same rows; NaN when the gate did not need
  // them (fp16/bf16, or the kernel reached min_cosine).
  double format_cosine = std::numeric_limits<double>::quiet_NaN();
  double format_rel_l2 = std::numeric_limits<double>::quiet_NaN();
  std::string verdict;   // the gate's one-line reason
  std::string summary() const;
};
CheckResult check_against_reference(Runtime::Impl& runtime, const Spec& spec, const Tiling& tiling, const Problem& problem,
                                    unsigned long long seed, bool bhsd_layout = false,
                                    CheckData data = CheckData::outliers);
// The comparison half of check_against_reference: `in.dout` holds what a kernel of (spec, tiling) wrote
// for `problem` from in's Q, K and V (tests run a deliberately broken launch and judge it here).
CheckResult evaluate_check(const Spec& spec, const Tiling& tiling, const Problem& problem, const DeviceInputs& in,
                           bool bhsd_layout = false);

}  // namespace qattn::rt

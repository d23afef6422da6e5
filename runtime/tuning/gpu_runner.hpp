// The tuner's view of the GPU: compile candidates in parallel (through the binary cache), verify each
// against the float64 host reference, and time it with CUDA events over rotating input buffers.
#pragma once
#include <map>
#include <string>

#include "qattn/tuner.hpp"
#include "runtime/jit/binary_provider.hpp"
#include "runtime/registry/runtime_impl.hpp"

namespace qattn::rt {

struct DeviceInputs;

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

// The cosine a quantized spec's output must reach on check_against_reference's data: 0.995, 0.99 where
// Q/K or V has a single per_tensor scale, 0.98 for INT4 Q/K (gpu_runner.cpp says why).
double min_cosine(const Spec& spec);

// Runs one spec/tiling on fresh random data with outliers and compares with the float64 reference:
// the tuner's gate, also used by `qattn run`. Thresholds: cosine >= min_cosine(spec) for quantized
// specs, relative L2 <= 1e-2 for fp16/bf16.
struct CheckResult {
  bool passed = false;
  double cosine = 0, rel_l2 = 0, max_abs = 0;
  long long non_finite = 0;
  std::string summary() const;
};
CheckResult check_against_reference(Runtime::Impl& runtime, const Spec& spec, const Tiling& tiling, const Problem& problem,
                                    unsigned long long seed, bool bhsd_layout = false);

}  // namespace qattn::rt

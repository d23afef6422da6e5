// The tuner: pick the fastest correct tiling of a spec for a problem bucket. It reaches the GPU only
// through CandidateRunner (implemented by the runtime), so all of its logic is tested on the CPU with a
// fake runner.
#pragma once
#include <string>
#include <vector>

#include "qattn/export.h"
#include "qattn/problem.hpp"
#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"

QATTN_PUBLIC_BEGIN
namespace qattn {

struct TimingOptions {
  int warmup = 3;        // launches not timed
  int repeats = 15;      // timed launches; the median is kept
  int rotate_buffers = 4;   // distinct input sets cycled through so L2 does not flatter
};

struct Verification {
  bool passed = false;
  std::string detail;   // metrics, e.g. "cos=0.99991 relL2=1.2e-2 maxabs=3.1e-2" or the failure
};

class CandidateRunner {
 public:
  virtual ~CandidateRunner() = default;
  // Compiles every tiling (in parallel where it can); element i is "" on success or the error text.
  virtual std::vector<std::string> compile(const Spec& spec, const std::vector<Tiling>& tilings) = 0;
  // Runs a compiled candidate on a small problem and compares it with the reference.
  virtual Verification verify(const Spec& spec, const Tiling& tiling) = 0;
  // Times a compiled, verified candidate on `problem`: one sample per timed launch, microseconds.
  virtual std::vector<double> time(const Spec& spec, const Tiling& tiling, const Problem& problem,
                                   const TimingOptions& options) = 0;
};

enum class CandidateStatus { won, lost, compile_failed, verify_failed, run_failed };
const char* to_string(CandidateStatus);

struct CandidateOutcome {
  Tiling tiling;
  std::string kernel_name;
  CandidateStatus status = CandidateStatus::lost;
  double median_us = 0;   // 0 unless timed
  std::string detail;     // verification metrics or the error
};

struct TuningResult {
  Tiling winner;
  std::string winner_name;
  double time_us = 0;
  std::vector<CandidateOutcome> candidates;   // every candidate, in the order tried
  std::string candidates_json() const;        // [{"kernel":...,"status":...,"us":...,"detail":...}, ...]
};

// Throws qattn::Error(failure) when no candidate compiles, verifies and runs; the message lists why
// each one was rejected.
TuningResult tune(const Spec& spec, const Problem& problem, const std::vector<Tiling>& candidates,
                  CandidateRunner& runner, const TimingOptions& options = {});

// Problem-size buckets: tuned winners are stored per bucket, and a representative problem of the
// bucket is what gets timed. Text: "q4096_kv4096_bh256" (powers of two, clamped).
std::string problem_bucket(const Problem& problem);
// The bucket as numbers (what problem_bucket prints): the runtime's in-process lookup keys on them.
struct ProblemBucket {
  long long q = 0, kv = 0, bh = 0;
};
ProblemBucket problem_bucket_dims(const Problem& problem);
Problem bucket_representative(const std::string& bucket, const Problem& like);

double median(std::vector<double> samples);

}  // namespace qattn
QATTN_PUBLIC_END

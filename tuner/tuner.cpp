#include "qattn/tuner.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"

namespace qattn {

const char* to_string(CandidateStatus s) {
  switch (s) {
    case CandidateStatus::won: return "won";
    case CandidateStatus::lost: return "lost";
    case CandidateStatus::compile_failed: return "compile_failed";
    case CandidateStatus::verify_failed: return "verify_failed";
    case CandidateStatus::run_failed: return "run_failed";
  }
  return "?";
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string TuningResult::candidates_json() const {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& c : candidates)
    arr.push_back({{"kernel", c.kernel_name}, {"status", to_string(c.status)}, {"us", c.median_us}, {"detail", c.detail}});
  return arr.dump();
}

TuningResult tune(const Spec& spec, const Problem& problem, const std::vector<Tiling>& tilings,
                  CandidateRunner& runner, const TimingOptions& options) {
  if (tilings.empty()) throw Error(ErrorKind::failure, "no candidate tilings to tune for " + to_string(spec));
  TuningResult result;
  const std::vector<std::string> compile_errors = runner.compile(spec, tilings);
  int best = -1;
  for (size_t i = 0; i < tilings.size(); ++i) {
    CandidateOutcome c;
    c.tiling = tilings[i];
    c.kernel_name = kernel_name(spec, tilings[i]);
    if (i < compile_errors.size() && !compile_errors[i].empty()) {
      c.status = CandidateStatus::compile_failed;
      c.detail = compile_errors[i];
      result.candidates.push_back(c);
      continue;
    }
    try {
      // A candidate must compute the right numbers before its speed counts at all.
      const Verification v = runner.verify(spec, tilings[i]);
      c.detail = v.detail;
      if (!v.passed) {
        c.status = CandidateStatus::verify_failed;
        result.candidates.push_back(c);
        continue;
      }
      c.median_us = median(runner.time(spec, tilings[i], problem, options));
      if (!(c.median_us > 0) || !std::isfinite(c.median_us)) {
        c.status = CandidateStatus::run_failed;
        c.detail = "no valid timing samples";
      }
    } catch (const std::exception& e) {
      c.status = CandidateStatus::run_failed;
      c.detail = e.what();
    }
    result.candidates.push_back(c);
    const CandidateOutcome& added = result.candidates.back();
    // Strictly faster wins: on a tie the earlier (hand-preferred) tiling stays.
    if (added.status == CandidateStatus::lost &&
        (best < 0 || added.median_us < result.candidates[static_cast<size_t>(best)].median_us))
      best = static_cast<int>(result.candidates.size() - 1);
  }
  if (best < 0) {
    std::string why;
    for (const auto& c : result.candidates)
      why += " [" + to_string(c.tiling) + ": " + to_string(c.status) + ": " + c.detail.substr(0, 200) + "]";
    throw Error(ErrorKind::failure, "no candidate of " + to_string(spec) + " passed:" + why);
  }
  CandidateOutcome& w = result.candidates[static_cast<size_t>(best)];
  w.status = CandidateStatus::won;
  result.winner = w.tiling;
  result.winner_name = w.kernel_name;
  result.time_us = w.median_us;
  return result;
}

}  // namespace qattn

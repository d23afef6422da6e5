#include "runtime/jit/compile_pool.hpp"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace qattn::rt {

std::string CompileOutcome::error_message() const {
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "unknown exception";
    }
  }
  return result.ok ? std::string() : result.log;
}

std::vector<CompileOutcome> compile_parallel(const std::vector<CompileRequest>& requests,
                                             unsigned threads) {
  std::vector<CompileOutcome> outcomes(requests.size());
  if (requests.empty()) return outcomes;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<size_t>(threads, requests.size()));

  // Workers claim the next unclaimed index, so long compiles don't hold up a fixed share of work.
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < requests.size(); i = next++) {
      try {
        outcomes[i].result = compile(requests[i]);
      } catch (...) {
        outcomes[i].error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  try {
    for (unsigned t = 1; t < threads; ++t) workers.emplace_back(work);
  } catch (const std::system_error&) {
    // Fewer threads than asked (resource limits): the ones started, and this one, do all the work.
  }
  work();
  for (std::thread& w : workers) w.join();
  return outcomes;
}

}  // namespace qattn::rt

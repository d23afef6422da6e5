// Compiles many translation units at once: NVRTC is thread-safe per program, and a tuning sweep or a
// cache warm-up compiles dozens of candidates, each taking a core for a fraction of a second.
#pragma once
#include <exception>
#include <string>
#include <vector>

#include "runtime/jit/nvrtc_compiler.hpp"

namespace qattn::rt {

// One request's outcome: a result (which may itself say ok = false for a compile error), or the
// exception compile() threw for it (bad arch, NVRTC failure), never both.
struct CompileOutcome {
  CompileResult result;
  std::exception_ptr error;
  bool ok() const { return !error && result.ok; }
  std::string error_message() const;   // the exception's what(), or the log when !result.ok, or ""
};

// Compiles every request on `threads` workers (0: std::thread::hardware_concurrency()); outcomes come
// back in request order. Never throws for a single request's failure.
std::vector<CompileOutcome> compile_parallel(const std::vector<CompileRequest>& requests,
                                             unsigned threads = 0);

}  // namespace qattn::rt

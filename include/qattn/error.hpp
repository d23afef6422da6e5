// One error type for the whole library. Its kind maps 1:1 onto the CLI exit codes and C status codes:
// bad input (2) says what was wrong and what is accepted; no_gpu (3) means the operation needs a CUDA
// driver and device and there is none; failure (1) is everything else (compile error, launch failure...).
#pragma once
#include <stdexcept>
#include <string>

#include "qattn/export.h"

QATTN_PUBLIC_BEGIN
namespace qattn {

enum class ErrorKind : int { failure = 1, bad_input = 2, no_gpu = 3 };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] inline void throw_bad_input(const std::string& message) {
  throw Error(ErrorKind::bad_input, message);
}

}  // namespace qattn
QATTN_PUBLIC_END

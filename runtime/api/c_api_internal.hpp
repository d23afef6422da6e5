// Shared by the C API's translation units (runtime/api/c_api*.cpp): the handle types, exception to
// status translation, argument checks and the reading of versioned structs (struct_size first).
#pragma once
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>

#include "qattn/error.hpp"
#include "qattn/qattn.h"
#include "qattn/linear.hpp"
#include "qattn/runtime.hpp"

struct qattn_runtime {
  explicit qattn_runtime(qattn::RuntimeOptions o) : rt(std::move(o)) {}
  qattn::Runtime rt;
};

struct qattn_prepared {
  std::unique_ptr<qattn::PreparedAttention> prepared;
};

struct qattn_attention_plan {
  const qattn_runtime* runtime = nullptr;   // the runtime that made it, the only one that may run it
  std::unique_ptr<qattn::AttentionPlan> plan;
};

struct qattn_append_plan {
  const qattn_runtime* runtime = nullptr;   // the runtime that made it, the only one that may run it
  std::unique_ptr<qattn::AppendPlan> plan;
};

struct qattn_linear_plan {
  const qattn_runtime* runtime = nullptr;
  std::unique_ptr<qattn::LinearPlan> plan;
};

struct qattn_decode_plan {
  const qattn_runtime* runtime = nullptr;   // the runtime that made it, the only one that may run it
  std::unique_ptr<qattn::DecodePlan> plan;
};

namespace qattn::capi {

// The calling thread's last message (qattn_last_error).
std::string& last_error();

template <class Body>
qattn_status guarded(Body&& body) {
  try {
    body();
    last_error().clear();
    return QATTN_OK;
  } catch (const qattn::Error& e) {
    last_error() = e.what();
    return static_cast<qattn_status>(e.kind());
  } catch (const std::exception& e) {
    last_error() = e.what();
    return QATTN_ERROR;
  } catch (...) {
    last_error() = "unknown error";
    return QATTN_ERROR;
  }
}

inline void require_arg(const void* p, const char* what) {
  if (!p) qattn::throw_bad_input(std::string(what) + " is NULL");
}

inline void copy_out(const std::string& s, char* out, size_t len) {
  if (!out || len == 0) return;
  const size_t n = std::min(len - 1, s.size());
  std::memcpy(out, s.data(), n);
  out[n] = '\0';
}

// Checks struct_size of a caller's versioned struct: at least `first_size` (the first version's size);
// beyond this library's sizeof(T), only zero bytes (fields of a newer header left at their defaults).
void check_struct_size(const void* p, size_t struct_size, size_t first_size, size_t known_size, const char* what);

// The caller's struct read into `defaults`: the first min(struct_size, sizeof(T)) bytes are the
// caller's, the rest keep the defaults (fields an older header does not have).
template <class T>
T read_versioned(const T* p, const T& defaults, size_t first_size, const char* what) {
  require_arg(p, what);
  check_struct_size(p, p->struct_size, first_size, sizeof(T), what);
  T out = defaults;
  std::memcpy(static_cast<void*>(&out), p, std::min(p->struct_size, sizeof(T)));
  out.struct_size = sizeof(T);
  return out;
}

// Fills a caller's struct of struct_size bytes with the defaults: zero beyond sizeof(T).
template <class T>
void init_versioned(T* p, size_t struct_size, const T& defaults, size_t first_size, const char* what) {
  require_arg(p, what);
  if (struct_size < first_size)
    qattn::throw_bad_input(std::string(what) + ": struct_size " + std::to_string(struct_size) + " is below the first version's " +
                           std::to_string(first_size) + " bytes; pass sizeof of the struct");
  std::memset(static_cast<void*>(p), 0, struct_size);
  T d = defaults;
  d.struct_size = struct_size;
  std::memcpy(static_cast<void*>(p), &d, std::min(struct_size, sizeof(T)));
}

// A plan's flags where QATTN_PLAN_CALLER_WORKSPACE is the only one accepted.
inline void require_workspace_flag_only(unsigned flags, const char* what) {
  if (flags & ~QATTN_PLAN_CALLER_WORKSPACE)
    qattn::throw_bad_input(std::string(what) + ": unknown flags " + std::to_string(flags & ~QATTN_PLAN_CALLER_WORKSPACE) +
                           "; accepted: QATTN_PLAN_CALLER_WORKSPACE (2)");
}

qattn::TensorView view_of(const qattn_tensor& t);
qattn::Problem problem_of(const qattn_shape& s);
// parse_spec of a non-NULL string.
qattn::Spec spec_of(const char* spec, const char* what);

}  // namespace qattn::capi

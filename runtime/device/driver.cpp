#include "runtime/device/driver.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "env/env.hpp"

namespace qattn::rt {
namespace {

constexpr const char* kDefaultDriverPath = "libcuda.so.1";
constexpr int kOldestDriver = 12000;   // cuLibrary*, cuKernel* and cuGetProcAddress_v2 arrived in 12.0

// Expands its argument first, so a cuda.h name becomes its versioned symbol before stringizing.
#define QATTN_SYMBOL_NAME(fn) QATTN_SYMBOL_NAME_(fn)
#define QATTN_SYMBOL_NAME_(fn) #fn

std::string driver_path() {
  const std::string path = env::libcuda();
  return path.empty() ? std::string(kDefaultDriverPath) : path;
}

std::string not_found_message(const std::string& detail) {
  return "CUDA driver not found (" + detail +
         "): a GPU is needed to launch kernels; compile-only operations still work";
}

// The outcome of the one attempt to load and initialise the driver.
struct DriverState {
  std::shared_ptr<const DriverApi> api;
  CUresult code = CUDA_SUCCESS;
  std::string call, message;   // set when api is unusable
};

const DriverState& driver_state() {
  static const DriverState state = [] {
    DriverState s;
    std::string error;
    s.api = load_driver_library(driver_path(), &error);
    if (!s.api) {
      s.code = CUDA_ERROR_NOT_INITIALIZED;
      s.call = "dlopen";
      s.message = error;
      return s;
    }
    CUresult r = s.api->cuInit(0);
    if (r != CUDA_SUCCESS) {
      const char* name = nullptr;
      const char* text = nullptr;
      s.api->cuGetErrorName(r, &name);
      s.api->cuGetErrorString(r, &text);
      s.code = r;
      s.call = "cuInit";
      s.message = std::string("cuInit failed: ") + (name ? name : "?") + " (" + (text ? text : "?") +
                  ")" + (r == CUDA_ERROR_NO_DEVICE ? ": no CUDA device is visible to this process" : "");
      s.api.reset();
      return s;
    }
    int version = 0;
    s.api->cuDriverGetVersion(&version);
    if (version < kOldestDriver) {
      s.code = CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER;
      s.call = "cuDriverGetVersion";
      s.message = "the CUDA driver supports CUDA " + std::to_string(version / 1000) + "." +
                  std::to_string(version % 1000 / 10) + "; qattn needs 12.0 or newer";
      s.api.reset();
    }
    return s;
  }();
  return state;
}

}  // namespace

DriverError::DriverError(std::string call, CUresult code, const std::string& message)
    : std::runtime_error(message), call_(std::move(call)), code_(code) {}

std::shared_ptr<const DriverApi> load_driver_library(const std::string& path, std::string* error) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    if (error) *error = not_found_message("dlopen " + path + ": " + (why ? why : "unknown error"));
    return nullptr;
  }
  auto api = std::make_shared<DriverApi>();
  api->library = std::shared_ptr<void>(handle, [](void* h) { dlclose(h); });
  api->path = path;
  std::string missing;
#define QATTN_RESOLVE(fn) \
  api->fn = reinterpret_cast<decltype(api->fn)>(dlsym(handle, QATTN_SYMBOL_NAME(fn)));
  QATTN_DRIVER_REQUIRED_FUNCTIONS(QATTN_RESOLVE)
  QATTN_DRIVER_OPTIONAL_FUNCTIONS(QATTN_RESOLVE)
#undef QATTN_RESOLVE
  // cuEventElapsedTime_v2 (12.8) only changed semantics for events recorded in graphs; before it,
  // the unversioned symbol has the same prototype.
  if (!api->cuEventElapsedTime)
    api->cuEventElapsedTime =
        reinterpret_cast<decltype(api->cuEventElapsedTime)>(dlsym(handle, "cuEventElapsedTime"));
#define QATTN_REQUIRE(fn) \
  if (!api->fn) missing += std::string(missing.empty() ? "" : ", ") + QATTN_SYMBOL_NAME(fn);
  QATTN_DRIVER_REQUIRED_FUNCTIONS(QATTN_REQUIRE)
#undef QATTN_REQUIRE
  if (!missing.empty()) {
    if (error)
      *error = not_found_message(path + " lacks " + missing +
                                 "; is it a CUDA 12.0+ libcuda.so.1?");
    return nullptr;
  }
  return api;
}

const DriverApi& driver() {
  const DriverState& s = driver_state();
  if (!s.api) throw DriverError(s.call, s.code, s.message);
  return *s.api;
}

bool driver_available(std::string* why) noexcept {
  try {
    const DriverState& s = driver_state();
    if (!s.api && why) *why = s.message;
    return s.api != nullptr;
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return false;
  }
}

bool stream_capturing(CUstream stream) {
  if (!driver_available() || !driver().cuStreamIsCapturing) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  check(driver().cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

std::string error_name(CUresult code) {
  const DriverState& s = driver_state();
  const char* name = nullptr;
  if (s.api && s.api->cuGetErrorName(code, &name) == CUDA_SUCCESS && name) return name;
  return "CUresult " + std::to_string(static_cast<int>(code));
}

std::string error_string(CUresult code) {
  const DriverState& s = driver_state();
  const char* text = nullptr;
  if (s.api && s.api->cuGetErrorString(code, &text) == CUDA_SUCCESS && text) return text;
  return "unknown CUDA error";
}

void check(CUresult code, const char* call) {
  if (code == CUDA_SUCCESS) return;
  throw DriverError(call, code,
                    std::string(call) + " failed: " + error_name(code) + " (" + error_string(code) + ")");
}

}  // namespace qattn::rt

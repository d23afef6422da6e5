// The CUDA driver API, loaded with dlopen at first use: qattn never links libcuda, so the library, its
// compiler and its caches work on machines without a GPU, and only launching kernels needs a driver.
#pragma once
#include <cuda.h>   // types and prototypes only; every entry point is resolved at run time

#include <memory>
#include <stdexcept>
#include <string>

namespace qattn::rt {

// A failed driver call: which call, its CUresult, and the driver's name and text for it.
class DriverError : public std::runtime_error {
 public:
  DriverError(std::string call, CUresult code, const std::string& message);
  const std::string& call() const noexcept { return call_; }
  CUresult code() const noexcept { return code_; }

 private:
  std::string call_;
  CUresult code_;
};

// Entry points qattn resolves. Each member is named by its cuda.h name, which cuda.h's own macros turn
// into the versioned symbol of the current ABI (cuMemAlloc -> cuMemAlloc_v2, cuEventElapsedTime ->
// cuEventElapsedTime_v2, ...): the symbol looked up and the prototype called can therefore never
// disagree. Required entries are present after a successful load; optional ones may be null.
#define QATTN_DRIVER_REQUIRED_FUNCTIONS(X)                                                          \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)                             \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem) \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)                                          \
  X(cuCtxGetCurrent) X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize)   \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)                                      \
  X(cuLibraryLoadData) X(cuLibraryUnload) X(cuLibraryGetKernel) X(cuKernelGetFunction)              \
  X(cuKernelSetAttribute) X(cuKernelGetAttribute) X(cuFuncSetAttribute) X(cuFuncGetAttribute)       \
  X(cuLaunchKernel)                                                                                 \
  X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo)                                                        \
  X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD)                                                   \
  X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync)                                    \
  X(cuMemsetD8) X(cuMemsetD8Async) X(cuMemsetD32) X(cuMemsetD32Async)                               \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery) X(cuStreamWaitEvent) \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize) X(cuEventQuery)         \
  X(cuEventElapsedTime)
// Newer than the oldest driver qattn runs on (12.0), or only needed by tests.
#define QATTN_DRIVER_OPTIONAL_FUNCTIONS(X) \
  X(cuFuncGetParamInfo) X(cuKernelGetParamInfo) X(cuCtxCreate) X(cuCtxDestroy) X(cuTensorMapEncodeTiled)    \
  X(cuStreamIsCapturing) X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiate)              \
  X(cuGraphLaunch) X(cuGraphDestroy) X(cuGraphExecDestroy) X(cuGraphCreate) X(cuGraphAddKernelNode)      \
  X(cuGraphAddMemsetNode) X(cuGraphExecKernelNodeSetParams) X(cuGraphExecMemsetNodeSetParams)

struct DriverApi {
#define QATTN_DRIVER_MEMBER(fn) decltype(&::fn) fn = nullptr;
  QATTN_DRIVER_REQUIRED_FUNCTIONS(QATTN_DRIVER_MEMBER)
  QATTN_DRIVER_OPTIONAL_FUNCTIONS(QATTN_DRIVER_MEMBER)
#undef QATTN_DRIVER_MEMBER
  std::shared_ptr<void> library;   // the dlopen handle; dlclose'd with the last copy
  std::string path;                // what was dlopen'ed
};

// Opens `path` and resolves every entry point, without calling cuInit. Returns null and sets *error
// (one line) when the library is missing or lacks a required symbol. Used by driver(); exposed for tests.
std::shared_ptr<const DriverApi> load_driver_library(const std::string& path, std::string* error);

// The process-wide driver: dlopen of $QATTN_LIBCUDA (default libcuda.so.1) and cuInit(0), both once.
// Throws DriverError (the same one on every call) when the driver is missing, too old or cuInit fails.
const DriverApi& driver();

// True when driver() is usable; otherwise false with the reason in *why. Never throws.
bool driver_available(std::string* why = nullptr) noexcept;

// cuGetErrorName / cuGetErrorString, or "CUresult <n>" when no driver is loaded.
// Whether work queued on `stream` now goes into a CUDA graph being captured (false without a driver).
bool stream_capturing(CUstream stream);

std::string error_name(CUresult code);
std::string error_string(CUresult code);

// Throws DriverError("<call>", code, ...) unless code is CUDA_SUCCESS.
void check(CUresult code, const char* call);

}  // namespace qattn::rt

// QATTN_CU(cuMemAlloc, &ptr, bytes): calls the driver entry point and throws DriverError on failure.
#define QATTN_CU(fn, ...) ::qattn::rt::check(::qattn::rt::driver().fn(__VA_ARGS__), #fn)

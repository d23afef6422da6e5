#include "runtime/device/module.hpp"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "env/env.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/device/launch_graph.hpp"

namespace qattn::rt {
namespace detail {

struct LibraryHandle {
  CUlibrary library = nullptr;
  ~LibraryHandle() {
    if (!library) return;
    try {
      driver().cuLibraryUnload(library);
    } catch (...) {
    }
  }
};

}  // namespace detail

namespace {

// QATTN_SYNC_LAUNCH=1 synchronises after every launch, so a faulting kernel is named at its launch.
bool sync_after_launch() { return env::sync_launch(); }

std::string describe(const char* what, const std::string& kernel, const DriverError& e) {
  return std::string(what) + " '" + kernel + "': " + e.what();
}

}  // namespace

Module Module::load(const std::vector<unsigned char>& image, int ordinal) {
  return load(image.data(), image.size(), ordinal);
}

Module Module::load(const void* image, size_t size, int ordinal) {
  if (!image || size == 0) throw std::invalid_argument("Module::load: empty image");
  ContextGuard guard(ordinal);   // validates the ordinal; the library itself is context-independent
  auto handle = std::make_shared<detail::LibraryHandle>();
  QATTN_CU(cuLibraryLoadData, &handle->library, image, nullptr, nullptr, 0u, nullptr, nullptr, 0u);
  Module m;
  m.library_ = std::move(handle);
  m.device_ = ordinal;
  return m;
}

Kernel Module::kernel(const std::string& name) const {
  if (!library_) throw std::logic_error("Module::kernel('" + name + "') on an empty module");
  Kernel k;
  try {
    QATTN_CU(cuLibraryGetKernel, &k.kernel_, library_->library, name.c_str());
  } catch (const DriverError& e) {
    throw DriverError(e.call(), e.code(), describe("no kernel", name, e));
  }
  k.library_ = library_;
  k.name_ = name;
  k.device_ = device_;
  // The parameter layout is read through the context's function: with lazy loading (the default)
  // the kernel is only resolved once a context asks for it.
  const DriverApi& api = driver();
  size_t offset = 0, size = 0;
  if (api.cuFuncGetParamInfo && api.cuFuncGetParamInfo(k.function(), 0, &offset, &size) == CUDA_SUCCESS)
    k.param_bytes_ = static_cast<long long>(size);
  else if (api.cuKernelGetParamInfo &&
           api.cuKernelGetParamInfo(k.kernel_, 0, &offset, &size) == CUDA_SUCCESS)
    k.param_bytes_ = static_cast<long long>(size);
  return k;
}

CUfunction Kernel::function() const {
  ContextGuard guard(device_);
  CUfunction f = nullptr;
  QATTN_CU(cuKernelGetFunction, &f, kernel_);
  return f;
}

void Kernel::set_attribute(CUfunction_attribute attribute, int value) const {
  try {
    // Per device: applies in every context of the device, current and future.
    QATTN_CU(cuKernelSetAttribute, attribute, value, kernel_, device_handle(device_));
  } catch (const DriverError& e) {
    throw DriverError(e.call(), e.code(), describe("setting an attribute of", name_, e));
  }
}

int Kernel::attribute(CUfunction_attribute attribute) const {
  int value = 0;
  QATTN_CU(cuKernelGetAttribute, &value, attribute, kernel_, device_handle(device_));
  return value;
}

void Kernel::set_max_dynamic_smem(int bytes) const {
  set_attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
}

int Kernel::max_dynamic_smem() const {
  return attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
}

int Kernel::registers() const { return attribute(CU_FUNC_ATTRIBUTE_NUM_REGS); }

void Kernel::launch(Dim3 grid, Dim3 block, unsigned smem_bytes, CUstream stream, const void* params,
                    size_t params_size) const {
  if (!kernel_) throw std::logic_error("launch of an empty Kernel");
  if (param_bytes_ >= 0 && static_cast<long long>(params_size) != param_bytes_)
    throw std::invalid_argument("kernel '" + name_ + "' takes a " + std::to_string(param_bytes_) +
                                "-byte parameter, got " + std::to_string(params_size) + " bytes");
  ContextGuard guard(device_);
  try {
    CUfunction f = nullptr;
    QATTN_CU(cuKernelGetFunction, &f, kernel_);
    if (LaunchRecorder* recorder = active_recorder()) {   // a plan's run being recorded (launch_graph.hpp)
      recorder->kernel(f, grid, block, smem_bytes, params, params_size);
      return;
    }
    void* args[] = {const_cast<void*>(params)};
    QATTN_CU(cuLaunchKernel, f, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem_bytes, stream,
             params ? args : nullptr, nullptr);
    if (sync_after_launch()) QATTN_CU(cuStreamSynchronize, stream);
  } catch (const DriverError& e) {
    throw DriverError(e.call(), e.code(),
                      describe("launch of", name_, e) + " [grid " + std::to_string(grid.x) + "x" +
                          std::to_string(grid.y) + "x" + std::to_string(grid.z) + ", block " +
                          std::to_string(block.x) + "x" + std::to_string(block.y) + "x" +
                          std::to_string(block.z) + ", smem " + std::to_string(smem_bytes) + "]");
  }
}

}  // namespace qattn::rt

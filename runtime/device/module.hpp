// Loaded cubins and their kernels. A Module is a CUDA library (cuLibraryLoadData): not tied to one
// context, so a kernel launches in whichever context ContextGuard picks on the launching thread (the
// caller's current context or the device's primary one) and the driver loads it there on first use.
#pragma once
#include <cuda.h>

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace qattn::rt {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

namespace detail {
struct LibraryHandle;   // owns the CUlibrary; shared by the Module and every Kernel taken from it
}

class Kernel {
 public:
  Kernel() = default;
  const std::string& name() const { return name_; }
  CUkernel handle() const { return kernel_; }
  int device() const { return device_; }
  explicit operator bool() const { return kernel_ != nullptr; }
  // Size of the kernel's first parameter, which launch() checks params_size against; -1 when the
  // driver cannot tell (older than 12.4).
  long long param_bytes() const { return param_bytes_; }

  // The kernel's CUfunction in the context ContextGuard(device()) selects.
  CUfunction function() const;

  // Dynamic shared memory above 48 KB must be opted into per kernel (up to max_smem_per_block_optin).
  void set_max_dynamic_smem(int bytes) const;
  int max_dynamic_smem() const;
  int registers() const;   // CU_FUNC_ATTRIBUTE_NUM_REGS
  int attribute(CUfunction_attribute attribute) const;
  void set_attribute(CUfunction_attribute attribute, int value) const;

  // Launches with `params` (params_size bytes, e.g. a qattn::AttentionParams) as the kernel's single
  // argument, on `stream` (null: the legacy default stream). Throws DriverError naming the kernel when
  // the launch is rejected; errors inside the kernel surface at the next synchronisation.
  void launch(Dim3 grid, Dim3 block, unsigned smem_bytes, CUstream stream, const void* params,
              size_t params_size) const;
  template <class Params>
  void launch(Dim3 grid, Dim3 block, unsigned smem_bytes, CUstream stream, const Params& params) const {
    static_assert(std::is_trivially_copyable<Params>::value, "kernel parameters are copied bytewise");
    launch(grid, block, smem_bytes, stream, &params, sizeof(Params));
  }

 private:
  friend class Module;
  std::shared_ptr<detail::LibraryHandle> library_;
  CUkernel kernel_ = nullptr;
  std::string name_;
  int device_ = 0;
  long long param_bytes_ = -1;   // size of the kernel's single parameter, -1 if the driver can't tell
};

class Module {
 public:
  Module() = default;
  // Loads a cubin image (copied by the driver) for use on device `ordinal`.
  static Module load(const std::vector<unsigned char>& image, int ordinal = 0);
  static Module load(const void* image, size_t size, int ordinal = 0);

  // Looks up a __global__ function by its (mangled, unless extern "C") name.
  Kernel kernel(const std::string& name) const;
  int device() const { return device_; }
  explicit operator bool() const { return library_ != nullptr; }

 private:
  std::shared_ptr<detail::LibraryHandle> library_;
  int device_ = 0;
};

}  // namespace qattn::rt

// Runtime::Impl — shared by the registry (registry.cpp), the tuner's GPU runner (gpu_runner.cpp) and
// the high-level attention call (attention_call.cpp).
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "cache/store.hpp"
#include "qattn/runtime.hpp"
#include "qattn/validate.hpp"
#include "runtime/binary_provider.hpp"
#include "runtime/device.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/module.hpp"

namespace qattn {

// A kernel loaded on the runtime's device.
class LoadedKernel final : public Kernel {
 public:
  LoadedKernel(Spec spec, Tiling tiling, rt::Module module, rt::Kernel fn, unsigned smem)
      : name_(kernel_name(spec, tiling)), spec_(spec), tiling_(tiling), module_(std::move(module)),
        fn_(std::move(fn)), smem_(smem) {}
  const std::string& name() const override { return name_; }
  const Spec& spec() const override { return spec_; }
  const Tiling& tiling() const override { return tiling_; }
  void launch(const AttentionParams& params, const Problem& problem, void* stream) const override;
  const rt::Kernel& function() const { return fn_; }

 private:
  static std::string kernel_name(const Spec& s, const Tiling& t);
  std::string name_;
  Spec spec_;
  Tiling tiling_;
  rt::Module module_;
  rt::Kernel fn_;
  unsigned smem_;
};

struct Runtime::Impl {
  explicit Impl(RuntimeOptions o);

  const rt::DeviceInfo& device();   // throws Error(no_gpu) without a driver or device
  cache::DeviceKey device_key();
  DeviceLimits limits();
  Arch device_arch();
  Spec resolve(const Spec& spec);

  // Loads (compiling or taking the cached cubin) the kernel of (spec, tiling); kept for the runtime's life.
  std::shared_ptr<LoadedKernel> load(const Spec& spec, const Tiling& tiling);
  // A loaded quantization pass by its rendered source (see quant_pipeline.cpp).
  std::shared_ptr<rt::Kernel> load_source(const Source& source);
  TuningResult tune(const Spec& spec, const Problem& problem);
  // Tiling, loaded kernel and split count of a decode call (decode_call.cpp).
  struct DecodePlan;
  DecodePlan plan_decode(const Spec& spec, const Problem& problem, const Tiling& requested, int requested_splits);

  RuntimeOptions options;
  Runtime* self = nullptr;   // the public object, for the runner's high-level calls
  std::unique_ptr<cache::Store> store;
  std::unique_ptr<rt::BinaryProvider> binaries;
  std::recursive_mutex mutex;   // guards the maps, counters and device info
  std::map<std::string, std::shared_ptr<LoadedKernel>> by_request;   // "spec|bucket"
  std::map<std::string, std::shared_ptr<LoadedKernel>> by_name;
  std::map<std::string, std::pair<rt::Module, std::shared_ptr<rt::Kernel>>> sources;   // quant passes
  RuntimeCounters counters;
  std::mutex workspace_mutex;
  std::map<void*, rt::DeviceBuffer> workspaces;   // attention()'s workspace per stream
  std::map<void*, rt::DeviceBuffer> decode_workspaces;   // decode()'s split partials per stream
  // decode()'s unified-max row flags per stream: the workspace, and where the last call's flags went
  // (the workspace or the caller's DecodeCall::row_flags) with their row count.
  struct DecodeFlags {
    rt::DeviceBuffer workspace;
    int* last = nullptr;
    long long rows = 0;
  };
  std::map<void*, DecodeFlags> decode_flags;
  std::optional<rt::DeviceInfo> device_info;
};

}  // namespace qattn

// The GPU side of `qattn pretune` (include/qattn/pretune.hpp, make_gpu_pretune_worker): a worker per device that tunes prefill
// items with its own Runtime and stores the winners, and the choice of devices.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qattn/pretune.hpp"
#include "qattn/runtime.hpp"

namespace qattn::rt {

class GpuCandidateRunner;

struct GpuPretuneOptions {
  int device = 0;                 // CUDA ordinal
  std::string cache_path;         // "" = the default cache
  int compile_jobs = 0;           // NVRTC threads for a spec's candidates; 0 = every hardware thread
  TimingOptions timing;
  // Decode items (one per decode spec, item.sweep = its problems). Unset: Runtime::tune_decode over
  // the items' KV lengths and batch x heads_kv sizes (rounded up to powers of two), and
  // Runtime::decode_tuned; tests replace them.
  std::function<ItemResult(Runtime&, const PretuneItem&)> decode_handler;
  std::function<bool(Runtime&, const PretuneItem&)> decode_done;
};

class GpuPretuneWorker final : public PretuneWorker {
 public:
  // Opens the cache (throws Error(failure) when no writable cache can be opened) and queries the device
  // (throws Error(no_gpu) when it is not there); kernels are compiled and timed later, on the worker's
  // thread, in the device's primary context.
  explicit GpuPretuneWorker(GpuPretuneOptions options);
  ~GpuPretuneWorker() override;

  std::string device_label() override;   // "gpu0"
  std::string device_class() override;   // the cache's device key text (name, cc, SMs, driver)
  std::string device_name() const { return name_; }
  // Prefill: the cache holds a winner Runtime::kernel() would take for (the spec on this device's arch,
  // the bucket) on this device and toolchain (the same lookup, Runtime::Impl::stored_tiling).
  bool done(const PretuneItem& item) override;
  // Prefill: compiles every candidate of the spec (once; later buckets find them in the binary cache),
  // verifies and times them on the bucket's representative problem, and stores the winner.
  ItemResult run(const PretuneItem& item) override;
  Runtime& runtime() { return runtime_; }

 private:
  ItemResult tune_prefill(const PretuneItem& item);
  void compile_candidates(const Spec& spec, const std::vector<Tiling>& candidates);

  GpuPretuneOptions options_;
  Runtime runtime_;
  std::string name_, class_;
  std::vector<std::string> compiled_specs_;   // specs whose candidates are in the binary cache already
  // The tuner's runner is kept while consecutive items time on the same inputs (head dim, output type,
  // problem): generating a 16k-token input set on the host costs seconds, so it is made once per group.
  std::unique_ptr<GpuCandidateRunner> runner_;
  std::string runner_inputs_;
};

// The devices to pretune on: "all" = every visible GPU, or a comma list of ordinals ("0,2"). Throws
// Error(no_gpu) when there is no driver or no device, Error(bad_input) for a malformed list or an
// ordinal that is not there.
std::vector<int> select_devices(const std::string& which);

}  // namespace qattn::rt

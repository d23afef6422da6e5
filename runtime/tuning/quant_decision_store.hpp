// The quant_format decisions of `calibrate` in the SQLite cache: one row per layer key for this device
// and toolchain (a new driver, GPU, NVRTC, qattn or template set measures again: its kernels may round
// differently).
#pragma once
#include <optional>
#include <string>

#include "cache/layered_store.hpp"
#include "qattn/calibrate.hpp"

namespace qattn::rt {

constexpr const char* kQuantFormatKind = "quant_format";

class CacheDecisionStore final : public DecisionStore {
 public:
  CacheDecisionStore(cache::LayeredStore& store, cache::DeviceKey device, std::string toolchain)
      : store_(store), device_(std::move(device)), toolchain_(std::move(toolchain)) {}
  std::optional<std::string> load(const std::string& layer_key) override;
  // Reads both cache layers (a shipped decision is reused); writes go to the user layer, and a cache
  // without one keeps nothing (the decision is still returned to the caller).
  void save(const std::string& layer_key, const std::string& json) override;

 private:
  cache::LayeredStore& store_;
  cache::DeviceKey device_;
  std::string toolchain_;
};

}  // namespace qattn::rt

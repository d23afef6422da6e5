// The two lookup keys of the cache. Both contain the toolchain, so a binary or a tuning result made by
// another NVRTC, another qattn or other templates is never served (it simply misses).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace qattn::cache {

// sha256 (lowercase hex) of: source \0 options joined by '\n' \0 arch \0 toolchain.
// `toolchain` is built by the caller, e.g. "nvrtc=13.0;qattn=0.1.0;templates=<digest>".
// Throws std::invalid_argument for an empty option, an option holding '\n' or '\0', or '\0' anywhere else: such input
// could make two different requests collide on one key.
std::string binary_key(std::string_view source, const std::vector<std::string>& options,
                       std::string_view arch, std::string_view toolchain);

// The device a tuning result was measured on. Results are only reused on the same device model,
// SM count (a MIG slice differs) and driver.
struct DeviceKey {
  std::string name;          // e.g. "NVIDIA H100 80GB HBM3"
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int driver_version = 0;    // cuDriverGetVersion(), e.g. 13000

  // Canonical one-line text, the database column: "cc=9.0;sms=132;driver=13000;name=NVIDIA H100 ...".
  // The name comes last so that the text stays unambiguous whatever characters it holds.
  std::string str() const;
  bool operator==(const DeviceKey& other) const;
  bool operator!=(const DeviceKey& other) const { return !(*this == other); }
};

}  // namespace qattn::cache

#include "cache/keys.hpp"

#include <stdexcept>

#include "cache/digest.hpp"

namespace qattn::cache {

std::string binary_key(std::string_view source, const std::vector<std::string>& options,
                       std::string_view arch, std::string_view toolchain) {
  auto reject_nul = [](std::string_view text, const char* what) {
    if (text.find('\0') != std::string_view::npos) {
      throw std::invalid_argument(std::string("binary_key: ") + what + " contains a NUL character");
    }
  };
  reject_nul(source, "the source");
  reject_nul(arch, "the arch");
  reject_nul(toolchain, "the toolchain");
  Sha256 hasher;
  hasher.update(source);
  hasher.update(std::string_view("\0", 1));
  for (std::size_t i = 0; i < options.size(); ++i) {
    reject_nul(options[i], "an option");
    if (options[i].empty()) throw std::invalid_argument("binary_key: an option is empty");
    if (options[i].find('\n') != std::string::npos) {
      throw std::invalid_argument("binary_key: option '" + options[i].substr(0, options[i].find('\n')) +
                                  "...' contains a newline (options are joined by newlines)");
    }
    if (i > 0) hasher.update("\n");
    hasher.update(options[i]);
  }
  hasher.update(std::string_view("\0", 1));
  hasher.update(arch);
  hasher.update(std::string_view("\0", 1));
  hasher.update(toolchain);
  return hasher.finish_hex();
}

std::string DeviceKey::str() const {
  return "cc=" + std::to_string(cc_major) + "." + std::to_string(cc_minor) + ";sms=" + std::to_string(sm_count) +
         ";driver=" + std::to_string(driver_version) + ";name=" + name;
}

bool DeviceKey::operator==(const DeviceKey& other) const {
  return name == other.name && cc_major == other.cc_major && cc_minor == other.cc_minor &&
         sm_count == other.sm_count && driver_version == other.driver_version;
}

}  // namespace qattn::cache

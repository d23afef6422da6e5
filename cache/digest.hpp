// SHA-256 (FIPS 180-4), written here so the cache needs no crypto library. Used for binary-cache keys
// and to detect blobs that changed on disk; it is not used for anything security-sensitive.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace qattn::cache {

// Incremental hasher: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  std::array<std::uint8_t, 32> finish();   // the hasher must not be updated afterwards
  std::string finish_hex();                 // 64 lowercase hex characters

 private:
  void compress(const std::uint8_t* block);

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_;
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

std::string sha256_hex(const void* data, std::size_t size);
std::string sha256_hex(std::string_view text);

}  // namespace qattn::cache

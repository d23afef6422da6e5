// SHA-256 against the FIPS 180-4 / NIST example vectors, the padding boundaries and chunked updates.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/digest.hpp"

namespace qattn::cache {
namespace {

TEST(Sha256, FipsExampleVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
                       "lmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256, OneMillionTimesA) {
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

std::string pattern_message(std::size_t size) {
  std::string message(size, '\0');
  for (std::size_t i = 0; i < size; ++i) message[i] = static_cast<char>((i * 31 + 7) % 251);
  return message;
}

// Lengths around the 55/56-byte point where the length field spills into an extra block, and whole
// blocks; expected values from Python's hashlib.
TEST(Sha256, PaddingBoundaries) {
  const std::vector<std::pair<std::size_t, const char*>> cases = {
      {55, "e40272620990d5f772101e014a0fe168d9ab13215739a04bdcb4b9cadc303c75"},
      {56, "5b3154594d65c2a11e797576e2b4ece47f48373d8acfc0ae2cc3b87ca7adaedc"},
      {63, "2caeed71c024d190f2f9633bdac2b8f283b1cb86dfe7709023ab70f11f747a1b"},
      {64, "3483dc12a3fea6618642162f88124ea56e797597a97483d5ba597a42d98aaf6b"},
      {65, "3a513663aae909c328f43e2d74265dc5ec35495c99dfde7b8f9dd37f297dfa40"},
      {119, "c06b1fcfb8d206bb4fe8e8cde10de7af236f619ff29c720de0083f7377491fd9"},
      {120, "f425d2567f5c636c99335e5e8bb04669475b3b8b6f7523bbabbd11115cef8550"},
  };
  for (const auto& [size, expected] : cases) {
    EXPECT_EQ(sha256_hex(pattern_message(size)), expected) << "message of " << size << " bytes";
  }
}

TEST(Sha256, ChunkedUpdatesMatchOneShot) {
  const std::string message = pattern_message(1000);
  const std::string expected = "008549d94fa71e7a0a483d84380d05a923a4b18e79ba1f8a8ddac923956d32ef";
  ASSERT_EQ(sha256_hex(message), expected);
  for (std::size_t chunk : {1, 3, 55, 63, 64, 65, 127, 999}) {
    Sha256 hasher;
    for (std::size_t offset = 0; offset < message.size(); offset += chunk) {
      hasher.update(std::string_view(message).substr(offset, chunk));
    }
    EXPECT_EQ(hasher.finish_hex(), expected) << "chunk size " << chunk;
  }
}

TEST(Sha256, RefusesUseAfterFinish) {
  Sha256 hasher;
  hasher.update("abc");
  hasher.finish();
  EXPECT_THROW(hasher.update("d"), std::logic_error);
  EXPECT_THROW(hasher.finish(), std::logic_error);
}

}  // namespace
}  // namespace qattn::cache

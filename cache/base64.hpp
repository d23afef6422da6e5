// Standard base64 (RFC 4648, with padding) for cubins in the cache export JSON.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qattn::cache {

std::string base64_encode(const std::vector<unsigned char>& bytes);
// nullopt for anything that is not canonical padded base64 (wrong length, a stray character).
std::optional<std::vector<unsigned char>> base64_decode(std::string_view text);

}  // namespace qattn::cache

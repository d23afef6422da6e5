#include "cache/base64.hpp"

#include <array>

namespace qattn::cache {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::array<int, 256> decoding_table() {
  std::array<int, 256> table{};
  table.fill(-1);
  for (int i = 0; i < 64; ++i) table[static_cast<unsigned char>(kAlphabet[i])] = i;
  return table;
}

}  // namespace

std::string base64_encode(const std::vector<unsigned char>& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const unsigned v = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
    for (int shift : {18, 12, 6, 0}) out += kAlphabet[(v >> shift) & 63];
  }
  const std::size_t rest = bytes.size() - i;
  if (rest > 0) {
    const unsigned v = (bytes[i] << 16) | (rest == 2 ? bytes[i + 1] << 8 : 0);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::vector<unsigned char>> base64_decode(std::string_view text) {
  static const std::array<int, 256> table = decoding_table();
  if (text.size() % 4 != 0) return std::nullopt;
  std::vector<unsigned char> out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=' && text[i + 3] == '=') : 0;
    int v[4];
    for (int j = 0; j < 4 - pad; ++j) {
      v[j] = table[static_cast<unsigned char>(text[i + j])];
      if (v[j] < 0) return std::nullopt;
    }
    for (int j = 4 - pad; j < 4; ++j) v[j] = 0;
    const unsigned bits = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    // Canonical form only: the bits a padded group drops must be zero.
    if ((pad == 1 && (bits & 0xff)) || (pad == 2 && (bits & 0xffff))) return std::nullopt;
    out.push_back(static_cast<unsigned char>(bits >> 16));
    if (pad < 2) out.push_back(static_cast<unsigned char>(bits >> 8));
    if (pad < 1) out.push_back(static_cast<unsigned char>(bits));
  }
  return out;
}

}  // namespace qattn::cache

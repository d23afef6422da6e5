// Nesting limit for every JSON text qattn reads (grids, imports, decisions, sample headers, rows of a
// cache). Deeply nested input ("[[[[...") must be refused before nlohmann::json sees it: building and
// destroying such a value recurses once per level and overflows the stack at a few tens of thousands
// of levels. The scan below is iterative and ignores brackets inside strings. See docs/reliability.md.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace qattn::cache {

// No file qattn writes or documents nests deeper than 6 levels; 64 leaves room for hand-written input.
constexpr int kMaxJsonDepth = 64;

// True when `text` opens more than `max_depth` arrays/objects inside one another.
inline bool json_too_deep(std::string_view text, int max_depth = kMaxJsonDepth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

// The one-line reason, for callers that throw their own error kind: "<what>: JSON nested deeper than 64 levels (...)".
inline std::string json_too_deep_message(const std::string& what, int max_depth = kMaxJsonDepth) {
  return what + ": JSON nested deeper than " + std::to_string(max_depth) +
         " levels (arrays/objects inside one another); accepted: at most " + std::to_string(max_depth);
}

}  // namespace qattn::cache

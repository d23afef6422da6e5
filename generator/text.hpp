// Small string helpers used by the spec, kernel-name and problem grammars.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace qattn::gen::text {

std::vector<std::string> split_ws(std::string_view s);                 // split on runs of whitespace
std::vector<std::string> split(std::string_view s, std::string_view sep);  // exact separator, keeps empties
std::string join(const std::vector<std::string>& parts, std::string_view sep);
bool parse_int(std::string_view s, long long& out);                   // whole string, decimal, optional '-'
bool starts_with(std::string_view s, std::string_view prefix);

}  // namespace qattn::gen::text

// Command-line arguments of the qattn tool: "--key value", "--flag" and positional words.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "qattn/runtime.hpp"

namespace qattn::cli {

class Args {
 public:
  // `flags` take no value; every other --key takes the next word. Throws bad_input for an unknown key.
  Args(int argc, char** argv, int first, const std::set<std::string>& keys, const std::set<std::string>& flags);
  bool has(const std::string& key) const { return values_.count(key) || flags_.count(key); }
  std::string get(const std::string& key, const std::string& fallback = "") const;
  std::string require(const std::string& key, const std::string& what) const;
  int get_int(const std::string& key, int fallback, int lo, int hi) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
  std::vector<std::string> positional_;
};

// Runtime options from the common flags: --db F, --no-cache, --no-tune, --device N.
RuntimeOptions runtime_options(const Args& args);

// Writes `bytes` to `path` by cache/safe_file.hpp's rules (temporary file + rename; devices and FIFOs
// written through; links, directories and existing SQLite databases refused with bad_input).
void write_file_atomically(const std::string& path, const std::string& bytes);

}  // namespace qattn::cli

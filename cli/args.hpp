// Command-line arguments of the qattn tool, read against one table per verb (cli/verb.hpp): "--key value",
// "--key=value", "--flag", the verb's short aliases, and positional words. Anything the table does not
// name is refused, so a mistyped option can never be ignored silently.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/verb.hpp"
#include "qattn/runtime.hpp"

namespace qattn::cli {

class Args {
 public:
  // Reads argv[first..argc). Throws bad_input (one line naming the word and pointing at
  // `qattn <verb> --help`) for an option the verb does not have, a missing value, or more positional words
  // than the verb takes. --help / -h anywhere sets help() and stops reading.
  Args(int argc, char** argv, int first, const Verb& verb);
  // The same from a list of words (the words after the verb's name).
  Args(const std::vector<std::string>& words, const Verb& verb);

  bool help() const { return help_; }
  bool has(const std::string& key) const { return values_.count(key) || flags_.count(key); }
  std::string get(const std::string& key, const std::string& fallback = "") const;
  std::string require(const std::string& key, const std::string& what) const;
  int get_int(const std::string& key, int fallback, int lo, int hi) const;
  const std::vector<std::string>& positional() const { return positional_; }
  const Verb& verb() const { return *verb_; }

 private:
  void read(const std::vector<std::string>& words);
  const Verb* verb_;
  bool help_ = false;
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

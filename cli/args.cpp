#include "cli/args.hpp"

#include <cstdio>
#include <fstream>

#include "cache/safe_file.hpp"
#include "generator/text.hpp"
#include "qattn/error.hpp"

namespace qattn::cli {

Args::Args(int argc, char** argv, int first, const std::set<std::string>& keys, const std::set<std::string>& flags) {
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      positional_.push_back(a);
      continue;
    }
    const std::string key = a.substr(2);
    if (flags.count(key)) {
      flags_.insert(key);
    } else if (keys.count(key)) {
      if (i + 1 >= argc) throw_bad_input("option " + a + " needs a value");
      values_[key] = argv[++i];
    } else {
      std::vector<std::string> all(keys.begin(), keys.end());
      all.insert(all.end(), flags.begin(), flags.end());
      for (auto& k : all) k = "--" + k;
      throw_bad_input("unknown option " + a + "; accepted here: " + text::join(all, " "));
    }
  }
}

std::string Args::get(const std::string& key, const std::string& fallback) const {
  const auto it = values_.find(key);
  return it == values_.end() ? fallback : it->second;
}

std::string Args::require(const std::string& key, const std::string& what) const {
  const auto it = values_.find(key);
  if (it == values_.end()) throw_bad_input("missing --" + key + " " + what);
  return it->second;
}

int Args::get_int(const std::string& key, int fallback, int lo, int hi) const {
  const auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  long long v = 0;
  if (!text::parse_int(it->second, v) || v < lo || v > hi)
    throw_bad_input("--" + key + " " + it->second + " is not an integer in [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "]");
  return static_cast<int>(v);
}

RuntimeOptions runtime_options(const Args& args) {
  RuntimeOptions o;
  o.cache_path = args.get("db");
  o.use_cache = !args.has("no-cache");
  o.tune = !args.has("no-tune");
  o.device = args.get_int("device", 0, 0, 64);
  return o;
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  // An existing SQLite file is someone's database, never a --out of ours: refuse rather than replace it.
  const cache::ReplaceCheck not_a_database = [](const std::string& existing) -> std::string {
    std::ifstream f(existing, std::ios::binary);
    char magic[16] = {};
    f.read(magic, sizeof magic);
    return std::string(magic, sizeof magic) == std::string("SQLite format 3\0", 16)
               ? "it is a SQLite database (delete it first, or choose another name)"
               : "";
  };
  try {
    cache::write_file_safely(path, bytes, not_a_database);
  } catch (const cache::BadPath& e) {
    throw_bad_input(e.what());
  } catch (const std::exception& e) {
    throw Error(ErrorKind::failure, e.what());
  }
}

}  // namespace qattn::cli

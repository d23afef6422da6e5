#include "cli/args.hpp"

#include <cstdio>
#include <fstream>

#include "cache/safe_file.hpp"
#include "generator/text.hpp"
#include "qattn/error.hpp"

namespace qattn::cli {
namespace {

const Option* find_option(const Verb& verb, const std::string& name) {
  for (const Option& o : verb.options)
    if (o.name == name) return &o;
  return nullptr;
}

std::string see_help(const Verb& verb) { return "see qattn " + verb.name + " --help"; }

[[noreturn]] void unknown_option(const Verb& verb, const std::string& word) {
  std::vector<std::string> names;
  for (const Option& o : verb.options) names.push_back("--" + o.name);
  for (const Alias& a : verb.aliases) names.push_back(a.word);
  const std::string accepted = names.empty() ? "none" : gen::text::join(names, " ");
  throw_bad_input("unknown option " + word + "; accepted here: " + accepted + " (" + see_help(verb) + ")");
}

}  // namespace

Args::Args(int argc, char** argv, int first, const Verb& verb) : verb_(&verb) {
  std::vector<std::string> words;
  for (int i = first; i < argc; ++i) words.emplace_back(argv[i]);
  read(words);
}

Args::Args(const std::vector<std::string>& words, const Verb& verb) : verb_(&verb) { read(words); }

void Args::read(const std::vector<std::string>& words) {
  const Verb& verb = *verb_;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    if (word == "--help" || word == "-h") {
      help_ = true;
      return;
    }
    if (word.size() < 2 || word[0] != '-') {
      positional_.push_back(word);
      if (static_cast<int>(positional_.size()) > verb.max_positional)
        throw_bad_input("unexpected argument '" + word + "' (" + see_help(verb) + ")");
      continue;
    }
    std::string key;
    std::string inline_value;
    bool has_inline_value = false;
    if (word.rfind("--", 0) == 0) {
      key = word.substr(2);
      if (const size_t eq = key.find('='); eq != std::string::npos) {
        inline_value = key.substr(eq + 1);
        key = key.substr(0, eq);
        has_inline_value = true;
      }
    } else {
      for (const Alias& a : verb.aliases)
        if (a.word == word) key = a.option;
      if (key.empty()) unknown_option(verb, word);
    }
    const Option* option = find_option(verb, key);
    if (!option) unknown_option(verb, has_inline_value ? "--" + key : word);
    if (option->value.empty()) {
      if (has_inline_value) throw_bad_input("option --" + key + " takes no value (" + see_help(verb) + ")");
      flags_.insert(key);
    } else if (has_inline_value) {
      values_[key] = inline_value;
    } else {
      // The next word is the value whatever it looks like: --max-rel-l1 -1 and --filter '-x' keep working.
      if (i + 1 >= words.size())
        throw_bad_input("option " + word + " needs a value: " + word + " " + option->value + " (" + see_help(verb) + ")");
      values_[key] = words[++i];
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
  if (!gen::text::parse_int(it->second, v) || v < lo || v > hi)
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

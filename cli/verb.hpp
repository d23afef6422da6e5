// One table per qattn verb: its options, what each means, and worked examples. The same table drives
// the parser (an option not in it is refused) and `qattn <verb> --help`, so the two cannot disagree.
#pragma once
#include <string>
#include <vector>

namespace qattn::cli {

class Args;

struct Option {
  std::string name;    // without the leading "--"
  std::string value;   // placeholder of its value, e.g. "FILE"; empty for a flag that takes no value
  std::string help;    // what it means, the accepted values, the default
};

struct Example {
  std::string command;   // the whole command line, starting with "qattn "
  std::string what;      // what it does
};

struct Alias {
  std::string word;     // e.g. "-o"
  std::string option;   // the option it stands for, e.g. "out"
};

struct Verb {
  std::string name;                  // "compile", or "cache export" for an action of cache
  std::string summary;               // one line for `qattn --help`
  std::vector<std::string> usage;    // synopsis lines, each after "qattn "
  std::string description;           // what it does and prints, whether it needs a GPU
  std::vector<Option> options;
  std::vector<Example> examples;     // 1 to 3
  int max_positional = 0;            // words that are not options; more is an error
  std::vector<Alias> aliases;
  int (*run)(const Args&) = nullptr;
};

// The help text of one verb: usage, description, options, examples, where the exit codes are listed.
std::string verb_help(const Verb& verb);

}  // namespace qattn::cli

// qattn — the command-line tool. Each verb is a table (cli/verb.hpp) beside its code; this file finds the
// verb (and, for cache, the action), reads the arguments against its table and maps errors to exit codes:
// 0 ok, 1 failure, 2 bad input, 3 a GPU is needed and there is none. Errors are one line on stderr.
#include <cstdio>
#include <string>
#include <vector>

#include "cache/log.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/verbs.hpp"
#include "qattn/error.hpp"

namespace qattn::cli {
namespace {

bool is_help(const std::string& word) { return word == "--help" || word == "-h"; }

const Verb* action_named(const Verb& group, const std::string& word) {
  for (const Verb* a : actions_of(group))
    if (a->name == group.name + " " + word) return a;
  return nullptr;
}

// The action of a verb with actions: its first word that is neither an option nor an option's value (so
// `qattn cache --db F list` still finds list). `--json` takes a value in some actions and not in others:
// it is read as taking one unless the next word is an action's name.
size_t find_action(const Verb& group, const std::vector<std::string>& words) {
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w.size() < 2 || w[0] != '-') return i;
    if (w.find('=') != std::string::npos || i + 1 >= words.size()) continue;
    bool takes_value = false;
    for (const Verb* a : actions_of(group)) {
      for (const Option& o : a->options)
        takes_value |= !o.value.empty() && w == "--" + o.name;
      for (const Alias& al : a->aliases) takes_value |= w == al.word;
    }
    if (takes_value && !action_named(group, words[i + 1])) ++i;
  }
  return words.size();
}

std::string action_names(const Verb& group) {
  std::string names;
  for (const Verb* a : actions_of(group)) names += (names.empty() ? "" : ", ") + a->name.substr(group.name.size() + 1);
  return names;
}

// An option word before the action that no action has: named as unknown, like any verb does.
void refuse_unknown_options(const Verb& group, const std::vector<std::string>& words, size_t end) {
  for (size_t i = 0; i < end; ++i) {
    const std::string& w = words[i];
    if (w.size() < 2 || w[0] != '-') continue;
    const std::string name = w.substr(0, w.find('='));
    bool known = false;
    for (const Verb* a : actions_of(group)) {
      for (const Option& o : a->options) known |= name == "--" + o.name;
      for (const Alias& al : a->aliases) known |= name == al.word;
    }
    if (!known) throw_bad_input("unknown option " + name + " (see qattn " + group.name + " --help)");
  }
}

int dispatch(const Verb*& verb, std::vector<std::string> words) {
  if (!actions_of(*verb).empty()) {
    const size_t at = find_action(*verb, words);
    for (size_t i = 0; i < at; ++i)
      if (is_help(words[i])) {
        std::fputs(verb_help(*verb).c_str(), stdout);
        return 0;
      }
    const Verb* action = at < words.size() ? action_named(*verb, words[at]) : nullptr;
    if (!action) refuse_unknown_options(*verb, words, at);
    if (at == words.size())
      throw_bad_input("an action is needed; accepted: " + action_names(*verb) + " (see qattn " + verb->name +
                      " --help)");
    if (!action)
      throw_bad_input("unknown " + verb->name + " action '" + words[at] + "'; accepted: " + action_names(*verb));
  verb = action;
    words.erase(words.begin() + static_cast<std::ptrdiff_t>(at));
  }
  const Args args(words, *verb);
  if (args.help()) {
    std::fputs(verb_help(*verb).c_str(), stdout);
    return 0;
  }
  return verb->run(args);
}

}  // namespace
}  // namespace qattn::cli

int main(int argc, char** argv) {
  using namespace qattn::cli;
  if (argc < 2) {
    std::fputs(top_level_help().c_str(), stderr);
    return 2;
  }
  std::string name = argv[1];
  if (is_help(name)) name = "help";
  if (name == "--version") name = "version";
  const Verb* verb = find_verb(name);
  if (!verb || name.find(' ') != std::string::npos) {
    std::fprintf(stderr, "qattn: unknown verb '%s'; accepted: ", argv[1]);
    for (const Verb* v : all_verbs()) std::fprintf(stderr, "%s%s", v->name.c_str(), v == all_verbs().back() ? "" : ", ");
    std::fprintf(stderr, ", --version, --help (see qattn --help)\n");
    return 2;
  }
  qattn::cache::report_trouble_on_stderr(true);   // a cache that cannot store is said once, not only under QATTN_LOG
  try {
    return dispatch(verb, std::vector<std::string>(argv + 2, argv + argc));
  } catch (const qattn::Error& e) {
    std::fprintf(stderr, "qattn %s: %s\n", verb->name.c_str(), e.what());
    return static_cast<int>(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qattn %s: %s\n", verb->name.c_str(), e.what());
    return 1;
  }
}

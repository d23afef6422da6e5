// The list of verbs, the options several verbs share, `qattn --help` and `qattn help <verb>`.
#include "cli/verbs.hpp"

#include <cstdio>
#include <sstream>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "qattn/error.hpp"

namespace qattn::cli {

Option db_option() {
  return {"db", "FILE", "the cache file (default: $QATTN_CACHE_DIR/qattn.db, else ~/.cache/qattn/qattn.db)"};
}
Option no_cache_option() { return {"no-cache", "", "use no cache file: compile and tune in memory only"}; }
Option no_tune_option() { return {"no-tune", "", "never tune: use the stored winner or the default tiling"}; }
Option device_option() { return {"device", "N", "the GPU ordinal, 0..64 (default 0)"}; }
Option json_option(const std::string& what) { return {"json", "", "print " + what + " as one JSON document on stdout"}; }

const std::vector<const Verb*>& all_verbs() {
  static const std::vector<const Verb*> verbs = {&doctor_verb(),  &version_verb(),   &compile_verb(),
                                                 &run_verb(),     &tune_verb(),      &pretune_verb(),
                                                 &report_verb(),  &calibrate_verb(), &cache_verb(),
                                                 &help_verb()};
  return verbs;
}

const Verb* find_verb(const std::string& name) {
  for (const Verb* v : all_verbs())
    if (v->name == name) return v;
  for (const Verb* v : all_verbs())
    for (const Verb* a : actions_of(*v))
      if (a->name == name) return a;
  return nullptr;
}

const std::vector<const Verb*>& actions_of(const Verb& verb) {
  static const std::vector<const Verb*> none;
  return &verb == &cache_verb() ? cache_actions() : none;
}

std::string top_level_help() {
  std::ostringstream out;
  out << "usage: qattn <verb> [options]        qattn <verb> --help for a verb's options and examples\n"
         "       qattn --version [--json]\n\n"
         "qattn renders, compiles (NVRTC), tunes and caches CUDA attention kernels. Verbs:\n";
  for (const Verb* v : all_verbs()) {
    std::string name = v->name;
    out << "  " << name << std::string(name.size() < 11 ? 11 - name.size() : 1, ' ') << v->summary << "\n";
  }
  out << "\nOptions are --name VALUE (or --name=VALUE) and flags --name; an option a verb does not have is an "
         "error.\n--json prints a verb's data as one JSON document on stdout (cache export/import: --json names "
         "the file).\nMessages and errors go to stderr; an error is one line saying what is accepted.\n"
         "Documentation: docs/cli.md\n\n"
      << kExitCodes;
  return out.str();
}

namespace {

int help(const Args& args) {
  const auto& words = args.positional();
  if (words.empty()) {
    std::fputs(top_level_help().c_str(), stdout);
    return 0;
  }
  const std::string name = words.size() == 2 ? words[0] + " " + words[1] : words[0];
  const Verb* verb = find_verb(name);
  if (!verb) {
    std::vector<std::string> names;
    for (const Verb* v : all_verbs()) names.push_back(v->name);
    std::string accepted;
    for (const std::string& n : names) accepted += (accepted.empty() ? "" : ", ") + n;
    throw_bad_input("no verb '" + name + "'; accepted: " + accepted);
  }
  std::fputs(verb_help(*verb).c_str(), stdout);
  return 0;
}

}  // namespace

const Verb& help_verb() {
  static const Verb verb{
      "help",
      "this list, or one verb's options and examples (same as qattn <verb> --help)",
      {"help [VERB [ACTION]]"},
      "Prints the list of verbs, or the usage, options and examples of one verb (for cache, of one action). "
      "Help text is documentation, not data: there is no --json.",
      {},
      {{"qattn help compile", "the options of qattn compile"}, {"qattn help cache merge", "the options of qattn cache merge"}},
      2,
      {},
      help};
  return verb;
}

}  // namespace qattn::cli

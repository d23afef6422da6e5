// The worked examples in `qattn <verb> --help` are commands a user will paste: every option they use is
// one the verb has, and every spec, spec family, shape, tiling and arch in them is valid.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>

#include "cli/verbs.hpp"
#include "qattn/calibrate.hpp"
#include "qattn/error.hpp"
#include "qattn/problem.hpp"
#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"
#include "qattn/validate.hpp"

namespace qattn::cli {
namespace {

// Shell words of a command line: blanks separate, single quotes group (enough for the examples).
std::vector<std::string> shell_words(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool quoted = false, any = false;
  for (char c : line) {
    if (c == '\'') {
      quoted = !quoted;
      any = true;
    } else if (c == ' ' && !quoted) {
      if (any) words.push_back(word);
      word.clear();
      any = false;
    } else {
      word += c;
      any = true;
    }
  }
  if (any) words.push_back(word);
  return words;
}

const Option* option_of(const Verb& v, const std::string& word) {
  for (const Option& o : v.options)
    if (word == "--" + o.name) return &o;
  for (const Alias& a : v.aliases)
    if (word == a.word)
      for (const Option& o : v.options)
        if (o.name == a.option) return &o;
  return nullptr;
}

void check_example(const Verb& v, const Example& e) {
  SCOPED_TRACE(e.command);
  std::vector<std::string> words = shell_words(e.command);
  const size_t verb_words = 1 + static_cast<size_t>(std::count(v.name.begin(), v.name.end(), ' ')) + 1;
  ASSERT_GE(words.size(), verb_words);
  std::map<std::string, std::string> values;
  for (size_t i = verb_words; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == ">") break;   // a redirection ends the command's own words
    if (w.size() < 2 || w[0] != '-') continue;
    const Option* o = option_of(v, w);
    ASSERT_NE(o, nullptr) << w << " is not an option of qattn " << v.name;
    if (!o->value.empty()) {
      ASSERT_LT(i + 1, words.size()) << w << " needs a value";
      values[o->name] = words[++i];
    }
  }
  try {
    Spec spec;
    if (values.count("spec")) {
      spec = parse_spec(values["spec"]);
      require(validate(spec));
    }
    if (values.count("spec-family")) spec = parse_spec_family(values["spec-family"]);
    if (values.count("arch"))
      for (size_t at = 0; at <= values["arch"].size();) {
        const size_t comma = std::min(values["arch"].find(',', at), values["arch"].size());
        parse_arch(values["arch"].substr(at, comma - at));
        at = comma + 1;
      }
    if (values.count("tiling")) parse_tiling(values["tiling"]);
    if (values.count("shape")) require(validate(spec, parse_problem(values["shape"])));
  } catch (const Error& err) {
    ADD_FAILURE() << err.what();
  }
}

TEST(CliExamples, UseTheVerbsOptionsAndValidSpecsAndShapes) {
  int checked = 0;
  for (const Verb* v : all_verbs()) {
    for (const Example& e : v->examples) {
      // A verb with actions: its examples are checked against the action they name.
      const Verb* target = v;
      if (!actions_of(*v).empty()) {
        const std::vector<std::string> words = shell_words(e.command);
        target = words.size() > 2 ? find_verb(v->name + " " + words[2]) : nullptr;
        ASSERT_NE(target, nullptr) << e.command;
      }
      check_example(*target, e);
      ++checked;
    }
    for (const Verb* a : actions_of(*v))
      for (const Example& e : a->examples) check_example(*a, e), ++checked;
  }
  EXPECT_GE(checked, 20);
}

// docs/cli.md is the overview a reader finds from the README: it names every verb and every option.
TEST(CliDocs, NameEveryVerbAndOption) {
  std::ifstream f(std::string(QATTN_SOURCE_DIR) + "/docs/cli.md");
  ASSERT_TRUE(f) << "docs/cli.md is missing";
  const std::string doc((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<const Verb*> verbs;
  for (const Verb* v : all_verbs()) {
    verbs.push_back(v);
    for (const Verb* a : actions_of(*v)) verbs.push_back(a);
  }
  for (const Verb* v : verbs) {
    EXPECT_NE(doc.find("| `" + v->name + "`"), std::string::npos) << v->name << " has no row in the verb table";
    EXPECT_NE(doc.find("\nqattn " + v->name), std::string::npos) << v->name << " has no synopsis";
    for (const Option& o : v->options) EXPECT_NE(doc.find("--" + o.name), std::string::npos) << v->name << " --" << o.name;
  }
  for (const char* code : {"| 0 |", "| 1 |", "| 2 |", "| 3 |"}) EXPECT_NE(doc.find(code), std::string::npos) << code;
}

}  // namespace
}  // namespace qattn::cli

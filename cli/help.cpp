// `qattn <verb> --help`: rendered from the verb's table (cli/verb.hpp).
#include <sstream>

#include "cli/verb.hpp"
#include "cli/verbs.hpp"

namespace qattn::cli {
namespace {

constexpr size_t kWidth = 100;

// `text` wrapped at kWidth columns; continuation lines start `indent` spaces in (the caller has already
// written the first line's indent).
void wrap(std::ostringstream& out, const std::string& text, size_t indent) {
  std::istringstream words(text);
  std::string word;
  size_t column = indent;
  bool line_start = true;
  while (words >> word) {
    if (!line_start && column + 1 + word.size() > kWidth) {
      out << "\n" << std::string(indent, ' ');
      column = indent;
      line_start = true;
    }
    if (!line_start) {
      out << ' ';
      ++column;
    }
    out << word;
    column += word.size();
    line_start = false;
  }
  out << "\n";
}

// Paragraphs are separated by blank lines in the tables' text; each is wrapped on its own.
void paragraphs(std::ostringstream& out, const std::string& text) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find("\n\n", start);
    if (end == std::string::npos) end = text.size();
    if (start > 0) out << "\n";
    wrap(out, text.substr(start, end - start), 0);
    start = end + 2;
  }
}

}  // namespace

std::string verb_help(const Verb& verb) {
  std::ostringstream out;
  for (size_t i = 0; i < verb.usage.size(); ++i) out << (i == 0 ? "usage: qattn " : "       qattn ") << verb.usage[i] << "\n";
  out << "\n";
  paragraphs(out, verb.description);
  if (const auto& actions = actions_of(verb); !actions.empty()) {
    out << "\nactions:\n";
    for (const Verb* a : actions) {
      const std::string action = a->name.substr(verb.name.size() + 1);
      out << "  " << action << std::string(action.size() < 8 ? 8 - action.size() : 1, ' ') << a->summary << "\n";
    }
  }
  out << "\noptions:\n";
  constexpr size_t kColumn = 26;
  auto option_line = [&](std::string left, const std::string& help) {
    left = "  " + left;
    if (left.size() + 2 > kColumn) {
      out << left << "\n" << std::string(kColumn, ' ');
    } else {
      out << left << std::string(kColumn - left.size(), ' ');
    }
    wrap(out, help, kColumn);
  };
  for (const Option& o : verb.options) {
    std::string left = "--" + o.name + (o.value.empty() ? "" : " " + o.value);
    for (const Alias& a : verb.aliases)
      if (a.option == o.name) left = a.word + (o.value.empty() ? "" : " " + o.value) + ", " + left;
    option_line(left, o.help);
  }
  option_line("-h, --help", "this help");
  if (!verb.examples.empty()) {
    out << "\nexamples:\n";
    for (const Example& e : verb.examples) {
      out << "  " << e.command << "\n      ";
      wrap(out, e.what, 6);
    }
  }
  out << "\n" << kExitCodesLine << "\n";
  return out.str();
}

}  // namespace qattn::cli

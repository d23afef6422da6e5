// The argument reader against a verb's table: what it accepts, and that everything else is bad input
// naming the word and the verb's --help.
#include <gtest/gtest.h>

#include "cli/args.hpp"
#include "qattn/error.hpp"

namespace qattn::cli {
namespace {

int no_op(const Args&) { return 0; }

const Verb& sample_verb() {
  static const Verb verb{"sample",
                         "a verb for this test",
                         {"sample [--size N] [--name S] [--out FILE] [--json] [WORD]"},
                         "Only for the test.",
                         {{"size", "N", "a number"}, {"name", "S", "a name"}, {"out", "FILE", "a file"}, {"json", "", "a flag"}},
                         {{"qattn sample --size 3", "three"}},
                         1,
                         {{"-o", "out"}},
                         no_op};
  return verb;
}

Args read(const std::vector<std::string>& words) { return Args(words, sample_verb()); }

std::string bad_input_message(const std::vector<std::string>& words) {
  try {
    read(words);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input);
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(CliArgs, ReadsValuesFlagsAliasesAndOnePositionalWord) {
  const Args a = read({"--size", "3", "--name=x=y", "-o", "f.txt", "--json", "word"});
  EXPECT_EQ(a.get_int("size", 0, 0, 10), 3);
  EXPECT_EQ(a.get("name"), "x=y");
  EXPECT_EQ(a.get("out"), "f.txt");
  EXPECT_TRUE(a.has("json"));
  EXPECT_FALSE(a.has("nothing"));
  ASSERT_EQ(a.positional().size(), 1u);
  EXPECT_EQ(a.positional()[0], "word");
  EXPECT_FALSE(a.help());
}

TEST(CliArgs, TheWordAfterAValueOptionIsItsValueWhateverItLooksLike) {
  EXPECT_EQ(read({"--name", "-1"}).get("name"), "-1");
  EXPECT_EQ(read({"--name", "--json"}).get("name"), "--json");
  EXPECT_EQ(read({"--name", ""}).get("name"), "");
  EXPECT_EQ(read({"--name", "a", "--name", "b"}).get("name"), "b") << "the last one wins";
}

TEST(CliArgs, HelpAnywhereStopsReading) {
  EXPECT_TRUE(read({"--help"}).help());
  EXPECT_TRUE(read({"-h"}).help());
  EXPECT_TRUE(read({"--size", "3", "--help", "--not-an-option"}).help());
}

TEST(CliArgs, UnknownOptionsAndStrayWordsAreBadInputNamingThemAndTheHelp) {
  std::string m = bad_input_message({"--bogus"});
  EXPECT_NE(m.find("unknown option --bogus"), std::string::npos) << m;
  EXPECT_NE(m.find("qattn sample --help"), std::string::npos) << m;
  EXPECT_NE(m.find("--size"), std::string::npos) << "the accepted options are listed: " << m;
  m = bad_input_message({"-x"});
  EXPECT_NE(m.find("unknown option -x"), std::string::npos) << m;
  m = bad_input_message({"--bogus=1"});
  EXPECT_NE(m.find("unknown option --bogus"), std::string::npos) << m;
  m = bad_input_message({"one", "two"});
  EXPECT_NE(m.find("unexpected argument 'two'"), std::string::npos) << m;
  m = bad_input_message({"--size"});
  EXPECT_NE(m.find("--size needs a value"), std::string::npos) << m;
  m = bad_input_message({"--json=yes"});
  EXPECT_NE(m.find("--json takes no value"), std::string::npos) << m;
  m = bad_input_message({"--"});
  EXPECT_NE(m.find("unknown option --"), std::string::npos) << m;
}

TEST(CliArgs, IntegersAreCheckedAgainstTheirRange) {
  EXPECT_THROW(read({"--size", "11"}).get_int("size", 0, 0, 10), Error);
  EXPECT_THROW(read({"--size", "3x"}).get_int("size", 0, 0, 10), Error);
  EXPECT_EQ(read({}).get_int("size", 7, 0, 10), 7);
  EXPECT_THROW(read({}).require("size", "N"), Error);
}

}  // namespace
}  // namespace qattn::cli

// Every verb (and every cache action) answers --help, -h and `qattn help <verb>` with its usage, each of
// its options and a worked example, exit 0; refuses an unknown option or a stray word with exit 2 and
// one line naming it; and `qattn --help` / `--version` work. The verbs come from the CLI's own tables,
// so a verb added later is covered without editing this test.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cache/schema.hpp"
#include "cli/verbs.hpp"
#include "tests/cli/run_cli.hpp"

namespace qattn::cli {
namespace {

using testing::one_line;
using testing::Outcome;
using testing::run_cli;

// Every verb a user can name: the top-level ones and the actions ("cache list").
std::vector<const Verb*> every_verb() {
  std::vector<const Verb*> verbs;
  for (const Verb* v : all_verbs()) {
    verbs.push_back(v);
    for (const Verb* a : actions_of(*v)) verbs.push_back(a);
  }
  return verbs;
}

TEST(CliHelp, TheTablesHaveWhatHelpNeeds) {
  for (const Verb* v : every_verb()) {
    SCOPED_TRACE(v->name);
    EXPECT_FALSE(v->summary.empty());
    EXPECT_FALSE(v->usage.empty());
    EXPECT_FALSE(v->description.empty());
    EXPECT_GE(v->examples.size(), 1u);
    EXPECT_LE(v->examples.size(), 3u);
    for (const Example& e : v->examples) EXPECT_EQ(e.command.rfind("qattn " + v->name, 0), 0u) << e.command;
    EXPECT_TRUE(v->run || !actions_of(*v).empty()) << "a verb runs something or has actions";
    for (const Option& o : v->options) EXPECT_FALSE(o.help.empty()) << o.name;
  }
}

void expect_verb_help(const Verb& v, const Outcome& o) {
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.err, "");
  EXPECT_EQ(o.out.rfind("usage: qattn " + v.name, 0), 0u) << o.out;
  EXPECT_NE(o.out.find("examples:\n  qattn " + v.name), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("exit codes"), std::string::npos) << o.out;
  for (const Option& opt : v.options) EXPECT_NE(o.out.find("--" + opt.name), std::string::npos) << opt.name;
}

TEST(CliHelp, EveryVerbAnswersHelpWithUsageOptionsAndExamples) {
  for (const Verb* v : every_verb()) {
    SCOPED_TRACE(v->name);
    const Outcome help = run_cli(v->name + " --help");
    expect_verb_help(*v, help);
    EXPECT_EQ(run_cli(v->name + " -h").out, help.out);
    EXPECT_EQ(run_cli("help " + v->name).out, help.out);
  }
}

TEST(CliHelp, HelpWinsOverOtherOptionsOfTheVerb) {
  const Outcome o = run_cli("compile --spec 'prefill qk=fp16 pv=fp16 out=fp16 d=64' --help");
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out.rfind("usage: qattn compile", 0), 0u) << o.out;
  EXPECT_EQ(run_cli("cache merge --help").code, 0) << "no operands needed for help";
  EXPECT_EQ(run_cli("cache --help").out.rfind("usage: qattn cache", 0), 0u);
}

TEST(CliHelp, TopLevelHelpListsEveryVerbAndTheExitCodes) {
  for (const char* how : {"--help", "-h", "help"}) {
    SCOPED_TRACE(how);
    const Outcome o = run_cli(how);
    EXPECT_EQ(o.code, 0) << o.err;
    for (const Verb* v : all_verbs()) EXPECT_NE(o.out.find("\n  " + v->name + " "), std::string::npos) << v->name;
    for (const char* code : {"  0  ok", "  1  failure", "  2  bad input", "  3  a GPU is needed"})
      EXPECT_NE(o.out.find(code), std::string::npos) << code;
  }
  const Outcome bare = run_cli("");
  EXPECT_EQ(bare.code, 2) << "no verb is bad input";
  EXPECT_NE(bare.err.find("usage: qattn"), std::string::npos) << bare.err;
}

TEST(CliHelp, VersionNamesLibraryNvrtcCommitAndSchema) {
  const Outcome text = run_cli("--version");
  EXPECT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find(std::string("qattn ") + QATTN_VERSION + " (commit "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("NVRTC "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("cache schema " + std::to_string(cache::kSchemaVersion)), std::string::npos) << text.out;
  EXPECT_EQ(run_cli("version").out, text.out);
  const Outcome json = run_cli("--version --json");
  ASSERT_EQ(json.code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j.at("qattn"), QATTN_VERSION);
  EXPECT_EQ(j.at("cache_schema_version"), cache::kSchemaVersion);
  EXPECT_FALSE(j.at("nvrtc").get<std::string>().empty());
  EXPECT_FALSE(j.at("git_commit").get<std::string>().empty());
}

TEST(CliErrors, EveryVerbRefusesAnUnknownOptionNamingItAndItsHelp) {
  for (const Verb* v : every_verb()) {
    SCOPED_TRACE(v->name);
    const Outcome o = run_cli(v->name + " --no-such-option 1");
    EXPECT_EQ(o.code, 2) << o.err;
    EXPECT_TRUE(one_line(o.err)) << o.err;
    EXPECT_NE(o.err.find("unknown option --no-such-option"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("qattn " + v->name + " --help"), std::string::npos) << o.err;
    EXPECT_EQ(o.out, "");
  }
}

TEST(CliErrors, EveryVerbRefusesStrayWords) {
  for (const Verb* v : every_verb()) {
    SCOPED_TRACE(v->name);
    // One more word than the verb takes (cache merge takes two files, help a verb and an action).
    std::string words;
    for (int i = 0; i <= v->max_positional; ++i) words += " stray" + std::to_string(i);
    // Should the words ever be ignored again, pretune must not start tuning the whole grid on a GPU.
    const Outcome o = run_cli(v->name + words + (v->name == "pretune" ? " --dry-run" : ""));
    EXPECT_EQ(o.code, 2) << o.err;
    EXPECT_TRUE(one_line(o.err)) << o.err;
    const std::string expected = actions_of(*v).empty()
                                     ? "unexpected argument 'stray" + std::to_string(v->max_positional) + "'"
                                     : "unknown " + v->name + " action 'stray0'";   // its first word is the action
    EXPECT_NE(o.err.find(expected), std::string::npos) << o.err;
  }
}

// Issue 29: `qattn compile --spec S -o k.cu` exited 0 and wrote nothing.
TEST(CliErrors, CompileRefusesAShortOptionItDoesNotHave) {
  cache::testing::TempDir dir;
  const std::string out = dir.file("k.cu");
  const Outcome o = run_cli("compile --spec 'prefill qk=fp16 pv=fp16 out=fp16 d=64' --arch sm_80 --no-cache -o " + out);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("unknown option -o"), std::string::npos) << o.err;
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(CliErrors, CompileRefusesOptionsOfTheOtherMode) {
  const std::string spec = "compile --spec 'prefill qk=fp16 pv=fp16 out=fp16 d=64' --arch sm_80 --no-cache";
  Outcome o = run_cli(spec + " --out k.cu");
  EXPECT_EQ(o.code, 2) << "--out without --emit wrote nothing before: " << o.err;
  EXPECT_NE(o.err.find("--emit"), std::string::npos) << o.err;
  o = run_cli(spec + " --jobs 2");
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("--jobs applies to --grid only"), std::string::npos) << o.err;
  o = run_cli("compile --grid default --tiling bm64_bn64_w4_s2 --filter '^none$' --no-cache");
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("--tiling does not go with --grid"), std::string::npos) << o.err;
  o = run_cli(spec + " --emit source --json");
  EXPECT_EQ(o.code, 2) << "JSON and the payload would share stdout: " << o.err;
  o = run_cli("compile --grid everything --no-cache");
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("accepted: default, space"), std::string::npos) << o.err;
  o = run_cli("compile --grid default --sample 3 --no-cache");
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("--sample applies to --grid space only"), std::string::npos) << o.err;
  o = run_cli("compile --grid space --seed 3 --filter '^none$' --no-cache");
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("give --sample N too"), std::string::npos) << o.err;
  o = run_cli("compile --grid space --sample 0 --no-cache");
  EXPECT_EQ(o.code, 2) << o.err;
  o = run_cli(spec + " --sample 2");
  EXPECT_EQ(o.code, 2) << o.err;
  o = run_cli("compile --grid default --repair --no-cache");
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("--repair applies to --grid space only"), std::string::npos) << o.err;
  o = run_cli("compile --grid space --repair --json --filter '^none$' --no-cache");
  EXPECT_EQ(o.code, 2) << o.err;
  o = run_cli(spec + " --repair");
  EXPECT_EQ(o.code, 2) << o.err;
}

TEST(CliErrors, UnknownVerbsAndCacheActionsAreBadInput) {
  Outcome o = run_cli("frobnicate");
  EXPECT_EQ(o.code, 2);
  EXPECT_TRUE(one_line(o.err)) << o.err;
  EXPECT_NE(o.err.find("'frobnicate'"), std::string::npos) << o.err;
  o = run_cli("cache frobnicate");
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("'frobnicate'; accepted: list, stats"), std::string::npos) << o.err;
  o = run_cli("cache");
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("an action is needed"), std::string::npos) << o.err;
  o = run_cli("help frobnicate");
  EXPECT_EQ(o.code, 2);
  EXPECT_TRUE(one_line(o.err)) << o.err;
}

}  // namespace
}  // namespace qattn::cli

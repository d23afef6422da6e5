// Hostile input never crashes the tool: JSON nested far deeper than any real file (refused before the
// recursive JSON code sees it) through every entry point that reads JSON, and --filter patterns that
// would overflow std::regex's recursion. Each is a one-line error with exit 2 (or bad_input in C++).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/store.hpp"
#include "qattn/calibrate.hpp"
#include "qattn/error.hpp"
#include "qattn/inflection.hpp"
#include "qattn/pretune.hpp"
#include "tests/cli/run_cli.hpp"

namespace qattn::cli {
namespace {

using cache::testing::TempDir;
using cache::testing::write_bytes;
using testing::one_line;
using testing::run_cli;

// Deep enough to overflow an 8 MiB stack in any recursive walk over the value.
std::string deep_array(int levels = 100000) { return std::string(levels, '[') + std::string(levels, ']'); }

template <class F>
void expect_bad_input(F&& f, const std::string& mentions) {
  try {
    f();
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input) << e.what();
    EXPECT_NE(std::string(e.what()).find(mentions), std::string::npos) << e.what();
  }
}

TEST(DeepJson, PretuneGridIsRefusedOnTheCli) {
  TempDir dir;
  for (const std::string& text : {deep_array(), "{\"version\": 1, \"entries\": " + deep_array() + "}"}) {
    write_bytes(dir.file("deep.json"), text);
    const auto o = run_cli("pretune --dry-run --grid " + dir.file("deep.json"));
    EXPECT_EQ(o.code, 2) << o.err;
    EXPECT_TRUE(one_line(o.err)) << o.err;
    EXPECT_NE(o.err.find("64 levels"), std::string::npos) << o.err;
  }
}

TEST(DeepJson, CacheImportIsRefusedOnTheCli) {
  TempDir dir;
  write_bytes(dir.file("deep.json"), "{\"format\": \"qattn-cache-export\", \"version\": 1, \"binaries\": " + deep_array() + "}");
  const auto o = run_cli("cache import --json " + dir.file("deep.json") + " --db " + dir.file("c.db"));
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_TRUE(one_line(o.err)) << o.err;
  EXPECT_NE(o.err.find("64 levels"), std::string::npos) << o.err;
}

// A stored decision row is JSON too: a damaged or hostile cache must not crash list or verify.
TEST(DeepJson, DecisionRowInACacheDoesNotCrash) {
  TempDir dir;
  {
    cache::Store store(dir.file("c.db"));
    cache::DecisionRecord d;
    d.kind = "quant";
    d.key = "layer";
    d.device = cache::testing::h100();
    d.toolchain = cache::testing::kToolchain;
    d.json = deep_array();
    store.put_decision(d);
  }
  const auto list = run_cli("cache list --db " + dir.file("c.db") + " --json");
  EXPECT_NE(list.code, -1) << list.err;
  EXPECT_TRUE(list.code == 0 || list.code == 1 || list.code == 2) << list.code << list.err;
  const auto verify = run_cli("cache verify --db " + dir.file("c.db"));
  EXPECT_EQ(verify.code, 1) << verify.out << verify.err;
  const auto exported = run_cli("cache export --db " + dir.file("c.db") + " --json " + dir.file("out.json"));
  EXPECT_NE(exported.code, -1) << exported.err;
}

TEST(DeepJson, EveryLibraryParserRefusesIt) {
  const std::string deep = deep_array();
  expect_bad_input([&] { parse_pretune_grid(deep, "g.json"); }, "64 levels");
  expect_bad_input([&] { decision_from_json(deep); }, "64 levels");
  expect_bad_input([&] { parse_inflection_table(deep); }, "64 levels");
  expect_bad_input([&] { parse_split_table(deep); }, "64 levels");
  const std::string header = deep_array(30000);   // within the header size limit
  std::vector<unsigned char> bytes = {'Q', 'A', 'T', 'T', 'N', 'S', 'M', 'P'};
  const uint32_t n = static_cast<uint32_t>(header.size());
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<unsigned char>(n >> (8 * i)));
  bytes.insert(bytes.end(), header.begin(), header.end());
  expect_bad_input([&] { parse_sample_file(bytes); }, "64 levels");
}

TEST(DeepJson, SixtyFourLevelsAreStillReadAsJson) {
  // At the limit the text reaches the JSON parser and fails on content, not on depth.
  try {
    parse_pretune_grid(deep_array(64), "g.json");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("64 levels"), std::string::npos) << e.what();
  }
}

// A number beyond double's range is an out_of_range error inside the JSON library, not a parse error:
// it must still be bad input (found by qattn_fuzz).
TEST(JsonNumbers, OutOfRangeIsBadInput) {
  expect_bad_input([] { parse_pretune_grid(R"({"version": 1e400, "entries": []})", "g.json"); }, "g.json");
  expect_bad_input([] { parse_inflection_table(R"({"version": 1e400})"); }, "1e400");
  expect_bad_input([] { decision_from_json(R"({"version": 1e400})"); }, "1e400");
  TempDir dir;
  write_bytes(dir.file("g.json"), R"({"version": 1, "entries": [{"specs": ["prefill qk=bf16 pv=bf16 out=bf16 d=128"], "problems": {"q_len": [1e400]}}]})");
  const auto o = run_cli("pretune --dry-run --grid " + dir.file("g.json"));
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_TRUE(one_line(o.err)) << o.err;
}

TEST(Filter, DeepOrLongPatternIsRefused) {
  const std::string deep = std::string(20000, '(') + std::string(20000, ')');
  for (const std::string& pattern : {deep, std::string(257, 'a'), std::string(17, '(') + "d128" + std::string(17, ')'),
                                     std::string("(d128"), std::string("[z-a]")}) {
    const auto o = run_cli("compile --grid default --arch sm_90a --no-cache --filter '" + pattern + "'");
    EXPECT_EQ(o.code, 2) << pattern.substr(0, 40) << ": " << o.err.substr(0, 300);
    EXPECT_TRUE(one_line(o.err)) << o.err.substr(0, 300);
    EXPECT_NE(o.err.find("at most 256 characters"), std::string::npos) << o.err.substr(0, 300);
  }
}

TEST(UnknownFlags, AreRefusedByPretuneReportCalibrate) {
  for (const char* verb : {"pretune --dry-run --grid default", "report", "calibrate"}) {
    const auto o = run_cli(std::string(verb) + " --no-such-flag");
    EXPECT_EQ(o.code, 2) << verb << ": " << o.err;
    EXPECT_TRUE(one_line(o.err)) << verb << ": " << o.err;
    EXPECT_NE(o.err.find("no-such-flag"), std::string::npos) << verb << ": " << o.err;
  }
}

}  // namespace
}  // namespace qattn::cli

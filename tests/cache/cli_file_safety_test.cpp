// Issue 29's table, row by row, through the built `qattn` tool (<build>/bin/qattn): what used to lose
// data or hang now exits 2 with one line on stderr and leaves every file as it was. No GPU needed.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "cache/maintenance.hpp"
#include "cache/store.hpp"
#include "cache_test_support.hpp"
#include "tests/cli/run_cli.hpp"

namespace qattn {
namespace {

namespace fs = std::filesystem;
using cache::testing::TempDir;
using cli::testing::Outcome;
using cli::testing::run_cli;

const char* kSpec = "'prefill qk=fp16 pv=fp16 out=fp16 d=64 arch=sm_80'";

void expect_bad_input(const Outcome& o, const std::string& needle) {
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << "one line: " << o.err;
  EXPECT_NE(o.err.find(needle), std::string::npos) << o.err;
}

class CliFileSafety : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(QATTN_CLI_PATH)) GTEST_SKIP() << "build the qattn tool first: " << QATTN_CLI_PATH << " is missing";
  }
  TempDir dir_;
};

TEST_F(CliFileSafety, ExportOntoItsOwnDatabaseIsRefused) {
  const std::string db = dir_.file("same.db");
  { cache::Store(db).put_binary(cache::testing::sample_binary(1)); }
  expect_bad_input(run_cli("cache export --db " + db + " --json " + db), "also an input");
  EXPECT_TRUE(cache::verify_file(db).empty());
}

TEST_F(CliFileSafety, AFileThatIsNotACacheIsRefusedNotRenamed) {
  const std::string notes = dir_.file("notes.json");
  cache::testing::write_bytes(notes, "{\"mine\": 1}\n");
  expect_bad_input(run_cli(std::string("compile --spec ") + kSpec + " --db " + notes), "not a qattn cache");
  EXPECT_EQ(cache::testing::read_bytes(notes), "{\"mine\": 1}\n");
  for (const auto& entry : fs::directory_iterator(dir_.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".corrupt-"), std::string::npos) << entry.path();
  }
}

TEST_F(CliFileSafety, OutputNeverFollowsALinkAtTheOldTemporaryName) {
  const std::string victim = dir_.file("victim"), out = dir_.file("k.cu");
  cache::testing::write_bytes(victim, "precious");
  fs::create_symlink(victim, out + ".tmp");
  const Outcome o = run_cli(std::string("compile --no-cache --spec ") + kSpec + " --emit source --out " + out);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(cache::testing::read_bytes(victim), "precious");
  EXPECT_NE(cache::testing::read_bytes(out).find("qattn generated"), std::string::npos);
}

TEST_F(CliFileSafety, DevicesAndFifosAreNoDatabaseAndNoInput) {
  const std::string fifo = dir_.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_bad_input(run_cli(std::string("compile --spec ") + kSpec + " --db " + fifo), "FIFO");
  expect_bad_input(run_cli(std::string("compile --spec ") + kSpec + " --db /dev/full"), "character device");
  expect_bad_input(run_cli("cache import --json /dev/zero --db " + dir_.file("c.db")), "regular file");
  expect_bad_input(run_cli("pretune --dry-run --grid /dev/zero"), "regular file");
  expect_bad_input(run_cli("pretune --dry-run --grid " + fifo), "regular file");
}

// Cache trouble is said once, in one line, without QATTN_LOG (it was silent).
TEST_F(CliFileSafety, CacheTroubleIsSaidOnceWithoutQattnLog) {
  const Outcome o = run_cli(std::string("compile --no-cache --spec ") + kSpec + " --emit source --out " +
                                      dir_.file("k.cu") + " --db " + dir_.file("ok.db"));
  ASSERT_EQ(o.code, 0) << o.err;
  const std::string shipped = dir_.file("missing-shipped.db");
  ::setenv("QATTN_SHIPPED_CACHE", shipped.c_str(), 1);
  ::unsetenv("QATTN_LOG");
  const Outcome with_trouble = run_cli(std::string("compile --spec ") + kSpec + " --db " + dir_.file("ok.db"));
  ::unsetenv("QATTN_SHIPPED_CACHE");
  EXPECT_EQ(with_trouble.code, 0) << "a missing shipped cache stores nothing less: " << with_trouble.err;
  EXPECT_EQ(std::count(with_trouble.err.begin(), with_trouble.err.end(), '\n'), 1) << with_trouble.err;
  EXPECT_NE(with_trouble.err.find("missing-shipped.db"), std::string::npos) << with_trouble.err;
}

// Another process inside BEGIN EXCLUSIVE for the whole run: one bounded wait (about 10 s), one line,
// and exit 1 because the kernel was not stored (it used to wait ~80 s on every write and exit 0).
TEST_F(CliFileSafety, ALockedCacheCostsOneBoundedWaitAndFailsTheStore) {
  const std::string db = dir_.file("locked.db");
  { cache::Store create(db); }
  cache::Database other(db, {});
  cache::Transaction held(other, cache::Transaction::Mode::exclusive);
  const auto start = std::chrono::steady_clock::now();
  const Outcome o = run_cli(std::string("compile --spec ") + kSpec + " --db " + db);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(o.code, 1) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  EXPECT_NE(o.err.find("not used again"), std::string::npos) << o.err;
  EXPECT_LT(seconds, 50) << "a 10 s budget per operation, once: " << o.err;
}

}  // namespace
}  // namespace qattn

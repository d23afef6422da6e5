// `qattn calibrate` argument errors: exit 2 and exactly one line on stderr, before any GPU work (so these
// run on machines without a GPU). Runs the built tool: <build>/bin/qattn, found from this test's path.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "qattn/calibrate.hpp"
#include "tests/cache/cache_test_support.hpp"

namespace qattn {
namespace {

std::string qattn_binary() {
  // <build>/tests/tuner/<this test>  ->  <build>/bin/qattn
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  return (self.parent_path().parent_path().parent_path() / "bin" / "qattn").string();
}

struct Outcome {
  int code = -1;
  std::string err;
};

Outcome run_cli(const std::string& args) {
  const std::string bin = qattn_binary();
  cache::testing::TempDir dir;
  const std::string err_file = dir.file("stderr");
  const std::string cmd = bin + " calibrate " + args + " >/dev/null 2>" + err_file;
  const int status = std::system(cmd.c_str());
  Outcome o;
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream f(err_file);
  o.err.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return o;
}

class CalibrateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(qattn_binary()))
      GTEST_SKIP() << "build the qattn tool first (ninja qattn_cli): " << qattn_binary() << " is missing";
  }
  void expect_bad_input(const std::string& args, const std::string& needle) {
    SCOPED_TRACE(args);
    const Outcome o = run_cli(args + " --db " + dir_.file("c.db"));
    EXPECT_EQ(o.code, 2) << o.err;
    ASSERT_FALSE(o.err.empty());
    EXPECT_EQ(o.err.find('\n'), o.err.size() - 1) << "one line: " << o.err;
    EXPECT_NE(o.err.find(needle), std::string::npos) << o.err;
  }
  cache::testing::TempDir dir_;
};

const std::string kFamily = "--spec-family 'prefill out=fp16 d=128 causal gqa=4'";
const std::string kShape = "--shape b=1,hq=8,hkv=2,q=256,kv=256";

TEST_F(CalibrateCli, MissingOrBadArgumentsExit2WithOneLine) {
  expect_bad_input("--layer l " + kShape, "--spec-family");
  expect_bad_input(kFamily + " " + kShape, "--layer");
  expect_bad_input(kFamily + " --layer l", "--shape");
  expect_bad_input(kFamily + " --layer '' " + kShape, "layer key is empty");
  expect_bad_input(kFamily + " --layer ' l' " + kShape, "space");
  expect_bad_input(kFamily + " --layer l " + kShape + " --min-cos 1.5", "min cosine");
  expect_bad_input(kFamily + " --layer l " + kShape + " --min-cos abc", "not a number");
  expect_bad_input(kFamily + " --layer l " + kShape + " --max-rel-l1 -1", "relative L1");
  expect_bad_input(kFamily + " --layer l " + kShape + " --max-rel-l1 0.05x", "not a number");
  expect_bad_input(kFamily + " --layer l " + kShape + " --bogus 1", "unknown option --bogus");
  expect_bad_input(kFamily + " --layer l " + kShape + " extra", "unexpected argument");
  expect_bad_input("--spec-family 'prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128' --layer l " + kShape,
                   "fp16/bf16 reference");
  expect_bad_input("--spec-family 'decode out=fp16 d=128' --layer l " + kShape, "prefill");
  expect_bad_input(kFamily + " --layer l --shape b=1,hq=8,hkv=8,q=64,kv=64", "gqa=4");
  expect_bad_input(kFamily + " --layer l --shape b=1,hq=8,hkv=2,q=0", "shape");
  expect_bad_input(kFamily + " --layer l " + kShape + " --inputs x.bin --random-outliers", "exclude");
  expect_bad_input(kFamily + " --layer l --inputs " + dir_.file("missing.bin"), "cannot open");
}

TEST_F(CalibrateCli, SampleFileMustMatchTheFamily) {
  SampleFile h;
  h.dtype = Fmt::bf16;
  h.problem = parse_problem("b=1,hq=8,hkv=2,q=4,kv=4");
  h.head_dim = 128;
  const std::vector<std::uint16_t> q(8 * 4 * 128), kv(2 * 4 * 128);
  const std::vector<unsigned char> bytes = encode_sample_file(h, q, kv, kv);
  const std::string path = dir_.file("s.bin");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  expect_bad_input(kFamily + " --layer l --inputs " + path, "bf16 data");
  expect_bad_input("--spec-family 'prefill out=bf16 d=128 gqa=4' --layer l --inputs " + path +
                       " --shape b=1,hq=8,hkv=2,q=8,kv=8",
                   "differs from the file");
  std::ofstream(dir_.file("junk.bin")) << "not a sample file";
  expect_bad_input(kFamily + " --layer l --inputs " + dir_.file("junk.bin"), "magic");
}

}  // namespace
}  // namespace qattn

// The public surfaces without a GPU: compile-only through the C++ and C APIs and the CLI, the binary
// cache across Runtime objects, and the documented errors and exit codes.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "qattn/error.hpp"
#include "qattn/qattn.h"
#include "qattn/runtime.hpp"
#include "generator/search_space.hpp"
#include "runtime/device/driver.hpp"

namespace qattn {
namespace {

namespace fs = std::filesystem;

class ApiCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qattn_api_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
    db_ = (dir_ / "qattn.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  bool have_gpu() const { return rt::driver_available(); }
  fs::path dir_;
  std::string db_;
};

const char* kInt8 = "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 causal smooth=k arch=sm_89";

TEST_F(ApiCpu, CompiledBinariesAreServedFromSqliteAcrossRuntimes) {
  const Spec spec = parse_spec(kInt8);
  const Tiling t = default_tiling(spec, default_limits(spec.arch));
  RuntimeOptions o;
  o.cache_path = db_;
  std::vector<unsigned char> first;
  {
    Runtime rt(o);
    const CompiledKernel k = rt.compile(spec, t);
    EXPECT_FALSE(k.from_cache);
    EXPECT_EQ(rt.counters().compiles, 1);
    first = k.cubin;
    EXPECT_TRUE(rt.compile(spec, t).from_cache);
    EXPECT_EQ(rt.counters().compiles, 1) << "the second request costs no compile";
    EXPECT_EQ(rt.counters().binary_db_hits, 1);
  }
  Runtime again(o);
  const CompiledKernel k = again.compile(spec, t);
  EXPECT_TRUE(k.from_cache);
  EXPECT_EQ(k.cubin, first);
  EXPECT_EQ(again.counters().compiles, 0);
  // Another tiling is another binary.
  const auto tilings = gen::candidate_tilings(spec, default_limits(spec.arch));
  ASSERT_GT(tilings.size(), 1u);
  EXPECT_FALSE(again.compile(spec, tilings[1]).from_cache);
}

TEST_F(ApiCpu, PtxAndSourceAreAvailableForInspection) {
  RuntimeOptions o;
  o.use_cache = false;
  Runtime rt(o);
  const Spec spec = parse_spec("prefill qk=bf16 pv=bf16 out=bf16 d=128 causal arch=sm_90a");
  const CompiledKernel k = rt.compile(spec, default_tiling(spec, default_limits(spec.arch)), true);
  EXPECT_NE(k.ptx.find("mma.sync"), std::string::npos);
  EXPECT_NE(k.source.find(k.kernel_name), std::string::npos);
  EXPECT_TRUE(rt.cache_path().empty());
}

TEST_F(ApiCpu, LaunchingWithoutAGpuIsAClearNoGpuError) {
  if (have_gpu()) GTEST_SKIP() << "this machine has a CUDA driver; the no-GPU path is checked on machines without one";
  RuntimeOptions o;
  o.use_cache = false;
  Runtime rt(o);
  try {
    rt.kernel(parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=128"), Problem{});
    FAIL() << "kernel() succeeded without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::no_gpu);
    EXPECT_NE(std::string(e.what()).find("compile-only"), std::string::npos) << e.what();
  }
}

TEST_F(ApiCpu, CApiStatusesAndMessages) {
  qattn_runtime_options opt = qattn_default_options();
  opt.cache_path = db_.c_str();
  qattn_runtime* rt = nullptr;
  ASSERT_EQ(qattn_runtime_create(&opt, &rt), QATTN_OK) << qattn_last_error();
  std::array<char, 256> name{};
  EXPECT_EQ(qattn_compile(rt, kInt8, nullptr, name.data(), name.size()), QATTN_OK) << qattn_last_error();
  EXPECT_EQ(std::string(name.data()).rfind("qattn_prefill_sm89_qki8tok_pvi8chn_of16_d64_causal_smoothk__", 0), 0u)
      << name.data();
  EXPECT_EQ(qattn_compile(rt, "prefill qk=int9:per_token pv=fp16 out=fp16 d=128 arch=sm_90a", nullptr, nullptr, 0),
            QATTN_BAD_INPUT);
  EXPECT_NE(std::string(qattn_last_error()).find("accepted: fp16, bf16, int8"), std::string::npos);
  EXPECT_EQ(qattn_compile(rt, "prefill qk=fp16 pv=fp16 out=fp16 d=128", nullptr, nullptr, 0), QATTN_BAD_INPUT)
      << "compile-only needs an arch";
  EXPECT_EQ(qattn_compile(rt, kInt8, "bm7_bn64_w4_s2", nullptr, 0), QATTN_BAD_INPUT);
  EXPECT_EQ(qattn_compile(nullptr, kInt8, nullptr, nullptr, 0), QATTN_BAD_INPUT);
  if (!have_gpu()) {
    qattn_shape shape{1, 8, 2, 64, 64};
    qattn_tensor t{reinterpret_cast<void*>(256), 0, 0, 128};
    EXPECT_EQ(qattn_attention(rt, "prefill qk=fp16 pv=fp16 out=fp16 d=128 gqa=4", shape, t, t, t, t, 0.f, nullptr, nullptr),
              QATTN_NO_GPU);
  }
  EXPECT_STREQ(qattn_version(), QATTN_VERSION);
  qattn_runtime_destroy(rt);
}

struct Proc {
  int code;
  std::string out;
};

Proc run_cli(const std::string& args) {
  const std::string cmd = std::string(QATTN_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  Proc r{-1, ""};
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST_F(ApiCpu, CliExitCodesAndOneLineErrors) {
  const std::string db = " --db " + db_;
  Proc r = run_cli("compile --spec 'prefill qk=int9:per_token pv=fp16 out=fp16 d=128' --arch sm_90a" + db);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(r.out.find("accepted:"), std::string::npos) << r.out;
  r = run_cli("compile --spec 'prefill qk=fp16 pv=fp16 out=fp16 d=80' --arch sm_90a" + db);
  EXPECT_EQ(r.code, 2) << r.out;
  r = run_cli("frobnicate");
  EXPECT_EQ(r.code, 2) << r.out;
  r = run_cli("compile --spec 'prefill qk=fp16 pv=fp16 out=fp16 d=64' --bogus 1");
  EXPECT_EQ(r.code, 2) << r.out;
  r = run_cli("doctor --json" + db);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"nvrtc\""), std::string::npos) << r.out;
  r = run_cli("run --spec 'prefill qk=fp16 pv=fp16 out=fp16 d=128 gqa=4' --shape b=1,hq=8,hkv=2,q=64 --no-cache");
  EXPECT_EQ(r.code, have_gpu() ? 0 : 3) << r.out;
  r = run_cli("run --spec 'prefill qk=fp16 pv=fp16 out=fp16 d=128 gqa=4' --shape b=1,hq=8,hkv=8,q=64 --no-cache");
  EXPECT_EQ(r.code, 2) << "hq/hkv disagrees with gqa: " << r.out;
}

TEST_F(ApiCpu, CliEmitsSourcePtxAndCubinAndKeepsTheCache) {
  const std::string db = " --db " + db_;
  const std::string out = (dir_ / "k.cu").string();
  Proc r = run_cli("compile --spec 'prefill qk=fp16 pv=fp16 out=fp16 d=64 causal' --arch sm_80 --emit source --out " + out + db);
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream f(out);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("extern \"C\" __global__"), std::string::npos);
  r = run_cli("compile --spec 'prefill qk=fp16 pv=fp16 out=fp16 d=64 causal' --arch sm_80 --emit cubin --out " +
              (dir_ / "k.cubin").string() + db);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("cached"), std::string::npos) << "the second compile of the same kernel hits the cache: " << r.out;
  EXPECT_GT(fs::file_size(dir_ / "k.cubin"), 1000u);
  r = run_cli("compile --spec 'prefill qk=fp16 pv=fp16 out=fp16 d=64 causal' --arch sm_80 --emit cubin" + db);
  EXPECT_EQ(r.code, 2) << "cubin to a terminal is refused: " << r.out;
  r = run_cli("cache stats" + db);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("binaries      1"), std::string::npos) << r.out;
  r = run_cli("cache clear" + db);
  EXPECT_EQ(r.code, 0) << r.out;
  r = run_cli("cache stats" + db);
  EXPECT_NE(r.out.find("binaries      0"), std::string::npos) << r.out;
  r = run_cli("compile --grid default --arch sm_86 --filter 'qkf16.*d64_causal' --json" + db);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"registers\""), std::string::npos) << r.out;
}

}  // namespace
}  // namespace qattn

// --json on the verbs that print data: stdout is exactly one JSON document (nlohmann parses all of it)
// with the fields the text form shows. Everything here works without a GPU; the GPU verbs are checked to
// accept --json (they stop at "no GPU", exit 3, not at the option).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cache/store.hpp"
#include "qattn/inflection.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/driver.hpp"
#include "tests/cli/run_cli.hpp"

namespace qattn::cli {
namespace {

using testing::Outcome;
using testing::read_text;
using testing::run_cli;

const std::string kSpec = "--spec 'prefill qk=fp16 pv=fp16 out=fp16 d=64 causal' --arch sm_80";

nlohmann::json json_of(const Outcome& o) {
  EXPECT_FALSE(o.out.empty()) << o.err;
  nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not one JSON document: " << o.out;
  return j;
}

// A decode dataflow decision like the ones `qattn pretune` stores, for report and cache list.
void store_dataflow_decision(const std::string& db) {
  InflectionTable t;
  t.family = "decode qk=int8:per_token pv=int8:per_token out=bf16 d=128 gqa=4 arch=sm_90a";
  t.paths = {{"gemv", Dataflow::gemv, {Tiling{4, 64, 4, 2}}}, {"mma_bm16", Dataflow::mma, {Tiling{16, 64, 4, 2}}}};
  DataflowBucket b;
  b.kv_len = 4096;
  b.rows = {4, 8, 16, 32};
  b.us = {{1, 2, 4, 8}, {3, 3, 3, 3}};
  b.choice = find_crossings(b.rows, b.us);
  t.buckets.push_back(b);
  cache::DecisionRecord r;
  r.kind = kDecodeDataflowKind;
  r.key = t.family;
  r.device = {"NVIDIA H100 80GB HBM3", 9, 0, 132, 13000};
  r.toolchain = "nvrtc=13.0;qattn=test";
  r.json = nlohmann::json(t).dump();
  cache::Store(db).put_decision(r);
}

class CliJson : public ::testing::Test {
 protected:
  cache::testing::TempDir dir_;
  std::string db_ = dir_.file("c.db");
};

TEST_F(CliJson, DoctorAndVersion) {
  nlohmann::json j = json_of(run_cli("doctor --json --db " + db_));
  EXPECT_EQ(j.at("qattn"), QATTN_VERSION);
  EXPECT_TRUE(j.at("cache").at("healthy").get<bool>()) << j.dump();
  EXPECT_TRUE(j.at("devices").is_array());
  j = json_of(run_cli("version --json"));
  EXPECT_EQ(j.at("qattn"), QATTN_VERSION);
}

TEST_F(CliJson, CompileOneSpecReportsTheKernelAndTheCacheHit) {
  Outcome o = run_cli("compile " + kSpec + " --json --db " + db_);
  ASSERT_EQ(o.code, 0) << o.err;
  nlohmann::json j = json_of(o);
  EXPECT_EQ(j.at("kernel").get<std::string>().rfind("qattn_prefill_sm80_", 0), 0u) << j.dump();
  EXPECT_EQ(j.at("arch"), "sm_80");
  EXPECT_GT(j.at("registers").get<int>(), 0);
  EXPECT_GE(j.at("spill_bytes").get<int>(), 0);
  EXPECT_GT(j.at("cubin_bytes").get<long long>(), 1000);
  EXPECT_FALSE(j.at("cached").get<bool>());
  EXPECT_TRUE(j.at("out").is_null());
  EXPECT_TRUE(j.at("notes").is_array());
  j = json_of(run_cli("compile " + kSpec + " --json --db " + db_));
  EXPECT_TRUE(j.at("cached").get<bool>()) << "the second compile is a cache hit";

  const std::string source = dir_.file("k.cu");
  o = run_cli("compile " + kSpec + " --emit source --out " + source + " --json --db " + db_);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(json_of(o).at("out"), source);
  EXPECT_NE(read_text(source).find("extern \"C\" __global__"), std::string::npos);
}

TEST_F(CliJson, CompileGridIsAnArrayOfRows) {
  const Outcome o = run_cli("compile --grid default --arch sm_80 --filter '^no-such-kernel$' --json --no-cache");
  ASSERT_EQ(o.code, 0) << o.err;
  const nlohmann::json j = json_of(o);
  EXPECT_TRUE(j.is_array());
  EXPECT_TRUE(j.empty());
}

// The spill sweep over a seeded draw of two sm_80 decode kernels: one row each, none spilled, and the
// same seed draws the same kernels.
TEST_F(CliJson, CompileSpaceSampleIsASeededDrawOfRows) {
  const std::string line = "compile --grid space --arch sm_80 --filter '^qattn_decode_' --sample 2 --seed 5 --json --no-cache";
  const Outcome o = run_cli(line);
  ASSERT_EQ(o.code, 0) << o.err;
  const nlohmann::json j = json_of(o);
  ASSERT_EQ(j.size(), 2u) << j.dump();
  for (const nlohmann::json& row : j) {
    EXPECT_TRUE(row.at("ok").get<bool>()) << row.dump();
    EXPECT_EQ(row.at("spill_bytes"), 0) << row.dump();
    EXPECT_EQ(row.at("kernel").get<std::string>().rfind("qattn_decode_sm80_", 0), 0u) << row.dump();
  }
  const nlohmann::json again = json_of(run_cli(line));
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].at("kernel"), j[0].at("kernel"));
  EXPECT_EQ(again[1].at("kernel"), j[1].at("kernel"));
}

TEST_F(CliJson, CacheActionsAndReport) {
  ASSERT_EQ(run_cli("compile " + kSpec + " --db " + db_).code, 0);
  store_dataflow_decision(db_);

  nlohmann::json j = json_of(run_cli("cache stats --json --db " + db_));
  EXPECT_EQ(j.at("binaries"), 1);
  EXPECT_EQ(j.at("decisions"), 1);
  j = json_of(run_cli("cache list --json --db " + db_));
  EXPECT_TRUE(j.at("tuned").is_array());
  ASSERT_EQ(j.at("decisions").size(), 1u);
  EXPECT_EQ(j.at("decisions")[0].at("kind"), kDecodeDataflowKind);
  EXPECT_EQ(j.at("decisions")[0].at("decision").at("format"), "qattn.decode_dataflow") << "the stored JSON, parsed";
  j = json_of(run_cli("cache verify --json --db " + db_));
  EXPECT_TRUE(j.at("ok").get<bool>()) << j.dump();
  EXPECT_TRUE(j.at("problems").empty());

  j = json_of(run_cli("report --json --db " + db_));
  ASSERT_EQ(j.at("groups").size(), 1u) << j.dump();
  EXPECT_EQ(j.at("groups")[0].at("dataflow").at("format"), "qattn.decode_dataflow");
  EXPECT_TRUE(j.at("groups")[0].at("splits").is_null());
  j = json_of(run_cli("report --json --kind decode_splits --db " + db_));
  EXPECT_TRUE(j.at("groups").empty());

  // export and import: --json names the file, which is the JSON.
  const std::string exported = dir_.file("c.json"), imported = dir_.file("d.db"), merged = dir_.file("m.db");
  Outcome o = run_cli("cache export --db " + db_ + " --json " + exported);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(nlohmann::json::parse(read_text(exported)).at("format"), "qattn-cache-export");
  ASSERT_EQ(run_cli("cache import --json " + exported + " --db " + imported).code, 0);
  j = json_of(run_cli("cache merge " + db_ + " " + imported + " -o " + merged + " --json"));
  EXPECT_EQ(j.at("out"), merged);
  EXPECT_EQ(j.at("added").at("binaries"), 1);
  EXPECT_TRUE(j.at("conflicts").is_array());
  j = json_of(run_cli("cache prune --db " + merged + " --keep-driver 12000 --json"));
  EXPECT_EQ(j.at("kept_driver"), 12000);
  EXPECT_EQ(j.at("deleted").at("decisions"), 1) << "the decision was made under driver 13000";
  j = json_of(run_cli("cache clear --db " + merged + " --json"));
  EXPECT_EQ(j.at("removed").at("binaries"), 1);
}

TEST_F(CliJson, PretuneDryRunAndPrintGrid) {
  const nlohmann::json j = json_of(run_cli("pretune --dry-run --kind decode --json"));
  ASSERT_GT(j.at("count").get<int>(), 0);
  EXPECT_EQ(j.at("items").size(), j.at("count").get<size_t>());
  EXPECT_NE(j.at("items")[0].at("key").get<std::string>().rfind("decode ", 0), std::string::npos);
  EXPECT_TRUE(json_of(run_cli("pretune --print-grid --json")).is_object());
}

TEST_F(CliJson, GpuVerbsAcceptJson) {
  const std::string spec = "--spec 'prefill qk=fp16 pv=fp16 out=fp16 d=128 gqa=4' --shape b=1,hq=8,hkv=2,q=64";
  if (rt::driver_available(nullptr) && rt::device_count() > 0) {
    // One short launch: the JSON the GPU path prints (tune, calibrate and pretune run in the GPU suites).
    const Outcome o = run_cli("run " + spec + " --no-cache --no-tune --json");
    ASSERT_EQ(o.code, 0) << o.err;
    const nlohmann::json j = json_of(o);
    EXPECT_TRUE(j.at("accuracy").at("passed").get<bool>()) << j.dump();
    EXPECT_GT(j.at("time_us").get<double>(), 0);
    return;
  }
  for (const std::string& cmd : std::vector<std::string>{
           "run " + spec + " --no-cache --json", "tune " + spec + " --no-cache --json",
        "calibrate --spec-family 'prefill out=fp16 d=128 gqa=4' --layer l --shape b=1,hq=8,hkv=2,q=64 --no-cache --json",
        "pretune --kind decode --json --db " + db_}) {
    SCOPED_TRACE(cmd);
    const Outcome o = run_cli(cmd);
    EXPECT_EQ(o.code, 3) << "stops at the missing GPU, not at --json: " << o.err;
  }
}

}  // namespace
}  // namespace qattn::cli

// Schema v2: the decision table (get/put/list through Store), the v1 -> v2 migration keeping every row,
// a v1 file opened read-only (used as is, no decisions), and the tuned lookup that explains its misses.
#include <gtest/gtest.h>

#include <string>

#include "cache/digest.hpp"
#include "cache/schema.hpp"
#include "cache/store.hpp"
#include "cache_test_support.hpp"

namespace qattn::cache {
namespace {

using testing::TempDir;

DecisionRecord sample_decision(const std::string& kind, const std::string& key, const std::string& json) {
  DecisionRecord record;
  record.kind = kind;
  record.key = key;
  record.device = testing::h100();
  record.toolchain = testing::kToolchain;
  record.json = json;
  record.created_at = 1760000100;
  return record;
}

// The v1 layout exactly as qattn 0.1.0 wrote it, with one binary and one tuned row.
void write_v1_fixture(const std::string& path, const BinaryRecord& binary, const TunedRecord& tuned) {
  Database db(path, {});
  db.exec(R"sql(
    CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
    CREATE TABLE kernel_binary (key TEXT PRIMARY KEY, kernel_name TEXT NOT NULL, arch TEXT NOT NULL,
      options TEXT NOT NULL, toolchain TEXT NOT NULL, image BLOB NOT NULL, image_size INTEGER NOT NULL,
      image_sha256 TEXT NOT NULL, registers INTEGER NOT NULL, spill_bytes INTEGER NOT NULL,
      smem_bytes INTEGER NOT NULL, compile_ms REAL NOT NULL, created_at INTEGER NOT NULL);
    CREATE TABLE tuned_kernel (spec TEXT NOT NULL, bucket TEXT NOT NULL, device TEXT NOT NULL,
      toolchain TEXT NOT NULL, device_name TEXT NOT NULL, cc_major INTEGER NOT NULL, cc_minor INTEGER NOT NULL,
      sm_count INTEGER NOT NULL, driver_version INTEGER NOT NULL, kernel_name TEXT NOT NULL,
      binary_key TEXT NOT NULL, time_us REAL NOT NULL, candidates_json TEXT NOT NULL,
      created_at INTEGER NOT NULL, PRIMARY KEY (spec, bucket, device, toolchain));
    INSERT INTO meta VALUES ('schema_version', 1), ('compatible_version', 1);
  )sql", "create the v1 fixture");
  Statement b(db, "INSERT INTO kernel_binary VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1760000000)");
  b.bind(1, binary.key).bind(2, binary.kernel_name).bind(3, binary.arch).bind(4, binary.options);
  b.bind(5, binary.toolchain).bind_blob(6, binary.image.data(), binary.image.size());
  b.bind(7, static_cast<long long>(binary.image.size()));
  b.bind(8, sha256_hex(binary.image.data(), binary.image.size()));
  b.bind(9, binary.registers).bind(10, binary.spill_bytes).bind(11, binary.smem_bytes).bind(12, binary.compile_ms);
  b.run();
  Statement t(db, "INSERT INTO tuned_kernel VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  t.bind(1, tuned.spec).bind(2, tuned.bucket).bind(3, tuned.device.str()).bind(4, tuned.toolchain);
  t.bind(5, tuned.device.name).bind(6, tuned.device.cc_major).bind(7, tuned.device.cc_minor);
  t.bind(8, tuned.device.sm_count).bind(9, tuned.device.driver_version).bind(10, tuned.kernel_name);
  t.bind(11, tuned.binary_key).bind(12, tuned.time_us).bind(13, tuned.candidates_json).bind(14, tuned.created_at);
  t.run();
  db.exec("PRAGMA journal_mode=DELETE", "keep the fixture in one file");
}

TEST(Decision, PutGetReplaceAndList) {
  TempDir dir;
  Store store(dir.file("d.db"));
  EXPECT_FALSE(store.get_decision("decode_splits", "spec_a", testing::h100(), testing::kToolchain).has_value());

  store.put_decision(sample_decision("decode_splits", "spec_b", R"({"splits":4})"));
  store.put_decision(sample_decision("decode_dataflow", "spec_a", R"({"flow":"kv_major"})"));
  store.put_decision(sample_decision("decode_splits", "spec_a", R"({"splits":2})"));
  DecisionRecord replaced = sample_decision("decode_splits", "spec_a", R"({"splits":8,"us":[3.1,2.9]})");
  replaced.created_at = 0;   // "now"
  store.put_decision(replaced);

  std::optional<DecisionRecord> got = store.get_decision("decode_splits", "spec_a", testing::h100(), testing::kToolchain);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->json, R"({"splits":8,"us":[3.1,2.9]})");
  EXPECT_EQ(got->device, testing::h100());
  EXPECT_GT(got->created_at, 1760000100);

  DeviceKey other_driver = testing::h100();
  other_driver.driver_version = 12080;
  EXPECT_FALSE(store.get_decision("decode_splits", "spec_a", other_driver, testing::kToolchain).has_value());
  EXPECT_FALSE(store.get_decision("decode_splits", "spec_a", testing::h100(), "nvrtc=12.8").has_value());

  std::vector<DecisionRecord> all = store.list_decisions();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].kind + "/" + all[0].key, "decode_dataflow/spec_a");
  EXPECT_EQ(all[1].kind + "/" + all[1].key, "decode_splits/spec_a");
  EXPECT_EQ(all[2].kind + "/" + all[2].key, "decode_splits/spec_b");
  EXPECT_EQ(store.list_decisions("decode_splits").size(), 2u);
  EXPECT_EQ(store.list_decisions("quant_format").size(), 0u);
  EXPECT_EQ(store.stats().decision_count, 3);

  store.clear();
  EXPECT_EQ(store.stats().decision_count, 0);
}

TEST(Decision, RejectsEmptyFieldsAndReadOnlyWrites) {
  TempDir dir;
  const std::string path = dir.file("d.db");
  {
    Store store(path);
    EXPECT_THROW(store.put_decision(sample_decision("decode_splits", "spec", "")), std::invalid_argument);
    EXPECT_THROW(store.put_decision(sample_decision("", "spec", "{}")), std::invalid_argument);
    EXPECT_EQ(store.stats().decision_count, 0);
  }
  Store read_only(path, Store::Options{true, 1000});
  EXPECT_THROW(read_only.put_decision(sample_decision("decode_splits", "spec", "{}")), CacheError);
}

TEST(Decision, V1FileUpgradesToV2KeepingItsRows) {
  TempDir dir;
  const std::string path = dir.file("v1.db");
  const BinaryRecord binary = testing::sample_binary(3);
  const TunedRecord tuned = testing::sample_tuned("spec_v1", 21.5);
  write_v1_fixture(path, binary, tuned);

  Store store(path);
  EXPECT_EQ(store.stats().schema_version, 2);
  EXPECT_EQ(store.stats().compatible_version, 1);
  std::optional<BinaryRecord> got_binary = store.get_binary(binary.key);
  ASSERT_TRUE(got_binary.has_value());
  EXPECT_EQ(got_binary->image, binary.image);
  std::optional<TunedRecord> got_tuned = store.get_tuned(tuned.spec, tuned.bucket, tuned.device, tuned.toolchain);
  ASSERT_TRUE(got_tuned.has_value());
  EXPECT_EQ(got_tuned->kernel_name, tuned.kernel_name);
  EXPECT_EQ(got_tuned->candidates_json, tuned.candidates_json);
  store.put_decision(sample_decision("quant_format", "spec_v1", R"({"format":"int8"})"));
  EXPECT_EQ(store.list_decisions().size(), 1u);
}

TEST(Decision, V1FileOpenedReadOnlyIsUsedAsIsWithoutDecisions) {
  TempDir dir;
  const std::string path = dir.file("shipped-v1.db");
  const TunedRecord tuned = testing::sample_tuned("spec_v1", 21.5);
  write_v1_fixture(path, testing::sample_binary(3), tuned);
  const std::string before = testing::read_bytes(path);
  {
    Store store(path, Store::Options{true, 1000});
    EXPECT_EQ(store.stats().schema_version, 1);
    EXPECT_EQ(store.stats().decision_count, 0);
    EXPECT_TRUE(store.list_decisions().empty());
    EXPECT_FALSE(store.get_decision("quant_format", "spec_v1", testing::h100(), testing::kToolchain).has_value());
    EXPECT_TRUE(store.get_tuned(tuned.spec, tuned.bucket, tuned.device, tuned.toolchain).has_value());
  }
  EXPECT_EQ(testing::read_bytes(path), before);
}

TEST(TunedLookupTest, ExplainsEveryKindOfMiss) {
  TempDir dir;
  Store store(dir.file("t.db"));
  const TunedRecord stored = testing::sample_tuned("spec_a", 10.0);   // h100, driver 13000
  store.put_tuned(stored);

  TunedLookup hit = store.lookup_tuned("spec_a", stored.bucket, testing::h100(), testing::kToolchain);
  EXPECT_EQ(hit.status, TunedLookup::Status::hit);
  ASSERT_TRUE(hit.record.has_value());
  EXPECT_EQ(hit.record->kernel_name, stored.kernel_name);

  DeviceKey new_driver = testing::h100();
  new_driver.driver_version = 13010;
  TunedLookup driver = store.lookup_tuned("spec_a", stored.bucket, new_driver, testing::kToolchain);
  EXPECT_EQ(driver.status, TunedLookup::Status::other_driver);
  ASSERT_TRUE(driver.record.has_value());
  EXPECT_EQ(driver.record->kernel_name, stored.kernel_name);
  EXPECT_NE(driver.reason.find("driver 13000"), std::string::npos) << driver.reason;
  EXPECT_NE(driver.reason.find("13010"), std::string::npos) << driver.reason;

  TunedLookup toolchain = store.lookup_tuned("spec_a", stored.bucket, new_driver, "nvrtc=13.1;qattn=0.2.0");
  EXPECT_EQ(toolchain.status, TunedLookup::Status::other_toolchain);
  EXPECT_FALSE(toolchain.record.has_value());
  EXPECT_NE(toolchain.reason.find("nvrtc=13.1"), std::string::npos) << toolchain.reason;

  DeviceKey mig = testing::h100();
  mig.sm_count = 16;   // a MIG slice: another device as far as timings go
  TunedLookup device = store.lookup_tuned("spec_a", stored.bucket, mig, testing::kToolchain);
  EXPECT_EQ(device.status, TunedLookup::Status::other_device);
  EXPECT_FALSE(device.record.has_value());
  EXPECT_NE(device.reason.find("sms=132"), std::string::npos) << device.reason;

  TunedLookup absent = store.lookup_tuned("spec_b", stored.bucket, testing::h100(), testing::kToolchain);
  EXPECT_EQ(absent.status, TunedLookup::Status::absent);
  EXPECT_STREQ(to_string(absent.status), "absent");

  const Store::Stats stats = store.stats();
  EXPECT_EQ(stats.tuned_hits, 1);
  EXPECT_EQ(stats.tuned_misses, 4);
}

}  // namespace
}  // namespace qattn::cache

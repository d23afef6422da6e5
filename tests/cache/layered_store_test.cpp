// LayeredStore: the user layer answers first, the shipped layer fills in, writes reach only the user
// layer, a missing user layer drops writes, and the tuned lookup reports the most useful miss.
#include <gtest/gtest.h>

#include "cache/layered_store.hpp"
#include "cache/open_layer.hpp"
#include "cache_test_support.hpp"

namespace qattn::cache {
namespace {

using testing::TempDir;

DecisionRecord decision(const std::string& key, const std::string& json) {
  DecisionRecord record;
  record.kind = "quant_format";
  record.key = key;
  record.device = testing::h100();
  record.toolchain = testing::kToolchain;
  record.json = json;
  record.created_at = 1760000000;
  return record;
}

// A shipped file with one binary, two tuned winners and a decision, written by a plain Store.
std::string make_shipped(const TempDir& dir) {
  const std::string path = dir.file("shipped.db");
  Store store(path);
  store.put_binary(testing::sample_binary(1));
  store.put_tuned(testing::sample_tuned("spec_both", 20.0));
  store.put_tuned(testing::sample_tuned("spec_shipped", 30.0));
  store.put_decision(decision("spec_both", R"({"format":"shipped"})"));
  return path;
}

std::unique_ptr<Store> read_only(const std::string& path) {
  return std::make_unique<Store>(path, StoreOptions{true, 1000});
}

TEST(LayeredStore, UserLayerFirstThenShipped) {
  TempDir dir;
  const std::string shipped_path = make_shipped(dir);
  auto user = std::make_unique<Store>(dir.file("user.db"));
  user->put_tuned(testing::sample_tuned("spec_both", 25.0));   // slower than shipped, but the user's own
  user->put_decision(decision("spec_both", R"({"format":"user"})"));
  LayeredStore layers(std::move(user), read_only(shipped_path));

  EXPECT_EQ(layers.get_tuned("spec_both", "b1_q4096_kv4096", testing::h100(), testing::kToolchain)->time_us, 25.0);
  EXPECT_EQ(layers.get_tuned("spec_shipped", "b1_q4096_kv4096", testing::h100(), testing::kToolchain)->time_us, 30.0);
  EXPECT_EQ(layers.get_decision("quant_format", "spec_both", testing::h100(), testing::kToolchain)->json,
            R"({"format":"user"})");
  ASSERT_TRUE(layers.get_binary(testing::sample_binary(1).key).has_value());   // only shipped has it
  EXPECT_FALSE(layers.get_binary(testing::sample_binary(2).key).has_value());

  TunedLookup hit = layers.lookup_tuned("spec_shipped", "b1_q4096_kv4096", testing::h100(), testing::kToolchain);
  EXPECT_EQ(hit.status, TunedLookup::Status::hit);
  EXPECT_EQ(hit.source, shipped_path);

  const std::vector<TunedRecord> all = layers.list_tuned();
  ASSERT_EQ(all.size(), 2u);   // spec_both once, the user's row
  EXPECT_EQ(all[0].spec, "spec_both");
  EXPECT_EQ(all[0].time_us, 25.0);
  EXPECT_EQ(layers.list_decisions().size(), 1u);
  EXPECT_NE(layers.sources().find("(read-write)"), std::string::npos) << layers.sources();
  EXPECT_NE(layers.sources().find(shipped_path + " (read-only)"), std::string::npos) << layers.sources();
}

TEST(LayeredStore, WritesGoToTheUserLayerOnly) {
  TempDir dir;
  const std::string shipped_path = make_shipped(dir);
  const std::string shipped_before = testing::read_bytes(shipped_path);
  const std::string user_path = dir.file("user.db");
  {
    LayeredStore layers(std::make_unique<Store>(user_path), read_only(shipped_path));
    EXPECT_TRUE(layers.writable());
    layers.put_binary(testing::sample_binary(7));
    EXPECT_TRUE(layers.put_tuned(testing::sample_tuned("spec_new", 5.0)));
    layers.put_decision(decision("spec_new", R"({"format":"int4"})"));
  }
  EXPECT_EQ(testing::read_bytes(shipped_path), shipped_before);
  Store user(user_path, StoreOptions{true, 1000});
  EXPECT_TRUE(user.get_binary(testing::sample_binary(7).key).has_value());
  EXPECT_TRUE(user.get_tuned("spec_new", "b1_q4096_kv4096", testing::h100(), testing::kToolchain).has_value());
  EXPECT_EQ(user.stats().decision_count, 1);
  Store shipped(shipped_path, StoreOptions{true, 1000});
  EXPECT_FALSE(shipped.get_binary(testing::sample_binary(7).key).has_value());
}

TEST(LayeredStore, WithoutAWritableUserLayerWritesAreDropped) {
  TempDir dir;
  const std::string shipped_path = make_shipped(dir);
  const std::string shipped_before = testing::read_bytes(shipped_path);
  LayeredStore layers(nullptr, read_only(shipped_path), {"qattn cache: /nowhere: why the user layer is missing"});
  EXPECT_FALSE(layers.writable());
  EXPECT_FALSE(layers.put_tuned(testing::sample_tuned("spec_new", 5.0)));
  layers.put_binary(testing::sample_binary(7));
  layers.put_decision(decision("spec_new", "{}"));
  EXPECT_FALSE(layers.get_tuned("spec_new", "b1_q4096_kv4096", testing::h100(), testing::kToolchain).has_value());
  EXPECT_TRUE(layers.get_tuned("spec_both", "b1_q4096_kv4096", testing::h100(), testing::kToolchain).has_value());
  EXPECT_EQ(layers.path(), shipped_path);
  EXPECT_NE(layers.sources().find("user none"), std::string::npos) << layers.sources();
  ASSERT_EQ(layers.warnings().size(), 1u);
  EXPECT_NE(layers.warnings()[0].find("why the user layer is missing"), std::string::npos);
  EXPECT_EQ(testing::read_bytes(shipped_path), shipped_before);
}

TEST(LayeredStore, RefusesAWritableShippedLayer) {
  TempDir dir;
  EXPECT_THROW(LayeredStore(nullptr, std::make_unique<Store>(dir.file("s.db"))), std::invalid_argument);
}

TEST(LayeredStore, LookupPrefersTheShippedOtherDriverEntryOverAUserMiss) {
  TempDir dir;
  const std::string shipped_path = make_shipped(dir);   // winners measured under driver 13000
  LayeredStore layers(std::make_unique<Store>(dir.file("user.db")), read_only(shipped_path));
  DeviceKey newer_driver = testing::h100();
  newer_driver.driver_version = 13020;
  TunedLookup found = layers.lookup_tuned("spec_shipped", "b1_q4096_kv4096", newer_driver, testing::kToolchain);
  EXPECT_EQ(found.status, TunedLookup::Status::other_driver);
  ASSERT_TRUE(found.record.has_value());
  EXPECT_EQ(found.record->time_us, 30.0);
  EXPECT_EQ(found.source, shipped_path);

  TunedLookup absent = layers.lookup_tuned("spec_nowhere", "b1_q4096_kv4096", testing::h100(), testing::kToolchain);
  EXPECT_EQ(absent.status, TunedLookup::Status::absent);
}

TEST(LayeredStore, OpenLayersWithShippedOnlyPath) {
  TempDir dir;
  const std::string shipped_path = make_shipped(dir);
  auto layers = open_layers(dir.file("sub/user.db"), shipped_path);
  EXPECT_TRUE(layers->writable());
  EXPECT_TRUE(layers->warnings().empty());
  EXPECT_TRUE(layers->get_binary(testing::sample_binary(1).key).has_value());
  EXPECT_EQ(layers->path(), dir.file("sub/user.db"));
}

}  // namespace
}  // namespace qattn::cache

// Schema versioning: a new file gets the current schema, the v0 prototype layout is migrated (rows
// kept, checksums added) all-or-nothing, and databases this code must not touch (newer incompatible
// schema, another program's tables) are refused and left byte-identical.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "cache/digest.hpp"
#include "cache/schema.hpp"
#include "cache/store.hpp"
#include "cache_test_support.hpp"

namespace qattn::cache {
namespace {

using testing::TempDir;

std::set<std::string> table_names(const std::string& path) {
  Database db(path, {});
  std::set<std::string> names;
  Statement query(db, "SELECT name FROM sqlite_master WHERE type = 'table'");
  while (query.step()) names.insert(query.column_text(0));
  return names;
}

// The v0 prototype layout (see schema.cpp), with two binaries and two tuned rows.
struct V0Fixture {
  BinaryRecord binary_a = testing::sample_binary(1), binary_b = testing::sample_binary(2, 70000);
  DeviceKey device_a = testing::h100();
  DeviceKey device_b{"NVIDIA A100-SXM4-80GB", 8, 0, 108, 12080};

  void write(const std::string& path, bool null_time = false) const {
    Database db(path, {});
    db.exec(R"sql(
      CREATE TABLE binaries (key TEXT PRIMARY KEY, kernel_name TEXT, arch TEXT, options TEXT, toolchain TEXT,
                             image BLOB);
      CREATE TABLE tuned (spec TEXT, bucket TEXT, device_name TEXT, cc_major INTEGER, cc_minor INTEGER,
                          sm_count INTEGER, driver_version INTEGER, toolchain TEXT, kernel_name TEXT,
                          binary_key TEXT, time_us REAL,
                          PRIMARY KEY (spec, bucket, device_name, cc_major, cc_minor, sm_count, driver_version,
                                       toolchain));
    )sql", "create the v0 fixture");
    for (const BinaryRecord* b : {&binary_a, &binary_b}) {
      Statement insert(db, "INSERT INTO binaries VALUES (?, ?, ?, ?, ?, ?)");
      insert.bind(1, b->key).bind(2, b->kernel_name).bind(3, b->arch).bind(4, b->options).bind(5, b->toolchain);
      insert.bind_blob(6, b->image.data(), b->image.size()).run();
    }
    int row = 0;
    for (const DeviceKey* d : {&device_a, &device_b}) {
      Statement insert(db, "INSERT INTO tuned VALUES ('spec_v0', 'bucket_v0', ?, ?, ?, ?, ?, ?, ?, ?, ?)");
      insert.bind(1, d->name).bind(2, d->cc_major).bind(3, d->cc_minor).bind(4, d->sm_count);
      insert.bind(5, d->driver_version).bind(6, testing::kToolchain).bind(7, "winner_" + std::to_string(row));
      insert.bind(8, binary_a.key);
      if (null_time && row == 1) {
        insert.bind_null(9);
      } else {
        insert.bind(9, 17.25 + row);
      }
      insert.run();
      ++row;
    }
  }
};

TEST(Schema, NewDatabaseGetsTheCurrentSchema) {
  TempDir dir;
  const std::string path = dir.file("sub/dir/new.db");   // parent directories are created
  {
    Store store(path);
    Store::Stats stats = store.stats();
    EXPECT_EQ(stats.schema_version, kSchemaVersion);
    EXPECT_EQ(stats.compatible_version, kCompatibleVersion);
    EXPECT_EQ(stats.binary_count, 0);
  }
  EXPECT_EQ(table_names(path), (std::set<std::string>{"meta", "kernel_binary", "tuned_kernel", "decision"}));
  Database db(path, {});
  SchemaInfo info = inspect_schema(db);
  EXPECT_EQ(info.schema_version, kSchemaVersion);
  EXPECT_EQ(info.compatible_version, kCompatibleVersion);
}

TEST(Schema, MigratesTheV0LayoutKeepingItsRows) {
  TempDir dir;
  const std::string path = dir.file("v0.db");
  V0Fixture fixture;
  fixture.write(path);
  {
    Database db(path, {});
    EXPECT_EQ(inspect_schema(db).schema_version, 0);
  }

  Store store(path);
  EXPECT_EQ(store.stats().schema_version, kSchemaVersion);   // v0 -> v1 -> v2 in one transaction
  EXPECT_EQ(table_names(path), (std::set<std::string>{"meta", "kernel_binary", "tuned_kernel", "decision"}));

  for (const BinaryRecord* expected : {&fixture.binary_a, &fixture.binary_b}) {
    std::optional<BinaryRecord> got = store.get_binary(expected->key);
    ASSERT_TRUE(got.has_value()) << expected->kernel_name;
    EXPECT_EQ(got->image, expected->image);
    EXPECT_EQ(got->kernel_name, expected->kernel_name);
    EXPECT_EQ(got->options, expected->options);
    EXPECT_EQ(got->registers, -1);   // unknown in v0
  }
  {
    Database db(path, {});
    Statement checksum(db, "SELECT image_sha256, image_size FROM kernel_binary WHERE key = ?");
    checksum.bind(1, fixture.binary_b.key);
    ASSERT_TRUE(checksum.step());
    EXPECT_EQ(checksum.column_text(0), sha256_hex(fixture.binary_b.image.data(), fixture.binary_b.image.size()));
    EXPECT_EQ(checksum.column_int64(1), 70000);
  }
  std::optional<TunedRecord> a = store.get_tuned("spec_v0", "bucket_v0", fixture.device_a, testing::kToolchain);
  std::optional<TunedRecord> b = store.get_tuned("spec_v0", "bucket_v0", fixture.device_b, testing::kToolchain);
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(a->kernel_name, "winner_0");
  EXPECT_EQ(a->time_us, 17.25);
  EXPECT_EQ(a->binary_key, fixture.binary_a.key);
  EXPECT_EQ(a->candidates_json, "[]");
  EXPECT_EQ(b->kernel_name, "winner_1");
  EXPECT_EQ(b->device, fixture.device_b);
  EXPECT_EQ(store.list_tuned().size(), 2u);
}

TEST(Schema, FailedMigrationRollsBackToV0) {
  TempDir dir;
  const std::string path = dir.file("v0-bad.db");
  V0Fixture fixture;
  fixture.write(path, /*null_time=*/true);
  try {
    Store store(path);
    FAIL() << "a v0 tuned row without a time was migrated";
  } catch (const CacheError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("migrating schema v0 to v2 failed and was rolled back"), std::string::npos) << message;
    EXPECT_NE(message.find("time_us"), std::string::npos) << message;
  }
  EXPECT_EQ(table_names(path), (std::set<std::string>{"binaries", "tuned"}));
  Database db(path, {});
  Statement count(db, "SELECT count(*) FROM binaries");
  ASSERT_TRUE(count.step());
  EXPECT_EQ(count.column_int64(0), 2);
}

// Rewrites the meta versions through a plain connection and leaves the file in rollback-journal mode,
// so that the whole database is in one file whose bytes can be compared.
void set_versions(const std::string& path, int schema_version, int compatible_version) {
  Database db(path, {});
  Statement update(db, "UPDATE meta SET value = ? WHERE key = ?");
  update.bind(1, schema_version).bind(2, "schema_version").run();
  update.reset();
  update.bind(1, compatible_version).bind(2, "compatible_version").run();
  db.exec("PRAGMA journal_mode=DELETE", "leave WAL");
}

TEST(Schema, RefusesANewerIncompatibleSchemaAndLeavesTheFileAlone) {
  TempDir dir;
  const std::string path = dir.file("future.db");
  {
    Store store(path);
    store.put_binary(testing::sample_binary(5));
  }
  set_versions(path, 7, 5);
  const std::string before = testing::read_bytes(path);
  for (bool read_only : {false, true}) {
    try {
      Store store(path, Store::Options{read_only, 1000});
      FAIL() << "opened a schema v7 database that needs a v5 reader";
    } catch (const CacheError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("schema v7"), std::string::npos) << message;
      EXPECT_NE(message.find("v5"), std::string::npos) << message;
      EXPECT_NE(message.find("newer qattn"), std::string::npos) << message;
      EXPECT_NE(message.find("left untouched"), std::string::npos) << message;
    }
    EXPECT_EQ(testing::read_bytes(path), before) << "read_only=" << read_only;
  }
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
}

TEST(Schema, OpensANewerButCompatibleSchemaAsIs) {
  TempDir dir;
  const std::string path = dir.file("newer.db");
  { Store store(path); }
  {
    // What a compatible v3 might do: add a column with a default.
    Database db(path, {});
    db.exec("ALTER TABLE kernel_binary ADD COLUMN note TEXT NOT NULL DEFAULT ''", "add a v3 column");
  }
  set_versions(path, 3, 1);
  Store store(path);
  EXPECT_EQ(store.stats().schema_version, 3);
  BinaryRecord record = testing::sample_binary(9);
  store.put_binary(record);
  std::optional<BinaryRecord> got = store.get_binary(record.key);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->image, record.image);
  Database db(path, {});
  EXPECT_EQ(inspect_schema(db).schema_version, 3);   // not "migrated" back down
}

TEST(Schema, RefusesADatabaseOfAnotherProgram) {
  TempDir dir;
  const std::string path = dir.file("other.db");
  {
    Database db(path, {});
    db.exec("CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('ada');", "create a foreign db");
  }
  const std::string before = testing::read_bytes(path);
  try {
    Store store(path);
    FAIL() << "opened another program's database as a cache";
  } catch (const CacheError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("not a qattn cache"), std::string::npos) << message;
    EXPECT_NE(message.find("users"), std::string::npos) << message;
  }
  EXPECT_EQ(testing::read_bytes(path), before);
}

TEST(Schema, ReadOnlyOpenNeverMigrates) {
  TempDir dir;
  const std::string path = dir.file("v0-ro.db");
  V0Fixture().write(path);
  const std::string before = testing::read_bytes(path);
  try {
    Store store(path, Store::Options{true, 1000});
    FAIL() << "a read-only open accepted a v0 database";
  } catch (const CacheError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("v0"), std::string::npos) << message;
    EXPECT_NE(message.find("read-only"), std::string::npos) << message;
  }
  EXPECT_EQ(testing::read_bytes(path), before);
}

}  // namespace
}  // namespace qattn::cache

#include "cache/schema.hpp"

#include <ctime>
#include <set>
#include <string>

#include "cache/digest.hpp"
#include "cache/keys.hpp"

namespace qattn::cache {
namespace {

// --- v1 ---------------------------------------------------------------------------------------------
// Frozen: a later version changes the layout through its own migration, never by editing this.
void create_v1_tables(Database& db) {
  db.exec(R"sql(
    CREATE TABLE meta (
      key   TEXT PRIMARY KEY,
      value INTEGER NOT NULL);
    CREATE TABLE kernel_binary (
      key          TEXT PRIMARY KEY,     -- binary_key(): sha256 of source, options, arch, toolchain
      kernel_name  TEXT NOT NULL,
      arch         TEXT NOT NULL,
      options      TEXT NOT NULL,
      toolchain    TEXT NOT NULL,
      image        BLOB NOT NULL,        -- cubin
      image_size   INTEGER NOT NULL,     -- checked with image_sha256 on every read
      image_sha256 TEXT NOT NULL,
      registers    INTEGER NOT NULL,
      spill_bytes  INTEGER NOT NULL,
      smem_bytes   INTEGER NOT NULL,
      compile_ms   REAL NOT NULL,
      created_at   INTEGER NOT NULL);    -- unix seconds
    CREATE TABLE tuned_kernel (
      spec            TEXT NOT NULL,
      bucket          TEXT NOT NULL,
      device          TEXT NOT NULL,     -- DeviceKey::str(); the fields below rebuild the DeviceKey
      toolchain       TEXT NOT NULL,
      device_name     TEXT NOT NULL,
      cc_major        INTEGER NOT NULL,
      cc_minor        INTEGER NOT NULL,
      sm_count        INTEGER NOT NULL,
      driver_version  INTEGER NOT NULL,
      kernel_name     TEXT NOT NULL,
      binary_key      TEXT NOT NULL,
      time_us         REAL NOT NULL,
      candidates_json TEXT NOT NULL,
      created_at      INTEGER NOT NULL,
      PRIMARY KEY (spec, bucket, device, toolchain));
  )sql", "create the schema v1 tables");
}

// The v0 layout, for reference (tests/cache builds it as a fixture):
//   binaries (key TEXT PRIMARY KEY, kernel_name TEXT, arch TEXT, options TEXT, toolchain TEXT, image BLOB)
//   tuned    (spec TEXT, bucket TEXT, device_name TEXT, cc_major INTEGER, cc_minor INTEGER,
//             sm_count INTEGER, driver_version INTEGER, toolchain TEXT, kernel_name TEXT,
//             binary_key TEXT, time_us REAL, PRIMARY KEY (spec, bucket, device_name, cc_major,
//             cc_minor, sm_count, driver_version, toolchain))
// v0 binaries are kept (their keys were already binary_key()) and get the checksum they lacked; tuned
// rows are kept too (they are expensive to redo) with an empty candidate log.
void migrate_v0_to_v1(Database& db) {
  create_v1_tables(db);
  const long long now = static_cast<long long>(std::time(nullptr));

  Statement old_binaries(db, "SELECT key, kernel_name, arch, options, toolchain, image FROM binaries "
                             "WHERE image IS NOT NULL");
  Statement insert_binary(db, "INSERT INTO kernel_binary (key, kernel_name, arch, options, toolchain, image, "
                              "image_size, image_sha256, registers, spill_bytes, smem_bytes, compile_ms, created_at) "
                              "VALUES (?, ?, ?, ?, ?, ?, ?, ?, -1, -1, 0, 0, ?)");
  while (old_binaries.step()) {
    std::vector<unsigned char> image = old_binaries.column_blob(5);
    insert_binary.reset();
    for (int i = 0; i < 5; ++i) insert_binary.bind(i + 1, old_binaries.column_text(i));
    insert_binary.bind_blob(6, image.data(), image.size());
    insert_binary.bind(7, static_cast<long long>(image.size()));
    insert_binary.bind(8, sha256_hex(image.data(), image.size()));
    insert_binary.bind(9, now);
    insert_binary.run();
  }

  Statement old_tuned(db, "SELECT spec, bucket, device_name, cc_major, cc_minor, sm_count, driver_version, "
                          "toolchain, kernel_name, binary_key, time_us FROM tuned");
  Statement insert_tuned(db, "INSERT INTO tuned_kernel (spec, bucket, device, toolchain, device_name, cc_major, "
                             "cc_minor, sm_count, driver_version, kernel_name, binary_key, time_us, "
                             "candidates_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '[]', ?)");
  while (old_tuned.step()) {
    DeviceKey device{old_tuned.column_text(2), int(old_tuned.column_int64(3)), int(old_tuned.column_int64(4)),
                     int(old_tuned.column_int64(5)), int(old_tuned.column_int64(6))};
    insert_tuned.reset();
    insert_tuned.bind(1, old_tuned.column_text(0)).bind(2, old_tuned.column_text(1)).bind(3, device.str());
    insert_tuned.bind(4, old_tuned.column_text(7)).bind(5, device.name).bind(6, device.cc_major);
    insert_tuned.bind(7, device.cc_minor).bind(8, device.sm_count).bind(9, device.driver_version);
    insert_tuned.bind(10, old_tuned.column_text(8)).bind(11, old_tuned.column_text(9));
    // A NULL time cannot be ranked: leave it NULL so the NOT NULL column rejects the migration
    // (rolled back, file stays v0) rather than inventing a time.
    if (old_tuned.column_is_null(10)) {
      insert_tuned.bind_null(12);
    } else {
      insert_tuned.bind(12, old_tuned.column_double(10));
    }
    insert_tuned.bind(13, now);
    insert_tuned.run();
  }
  db.exec("DROP TABLE binaries; DROP TABLE tuned;", "drop the schema v0 tables");
}

// --- v2 ---------------------------------------------------------------------------------------------
// Adds `decision`: small choices other parts of qattn make per device and toolchain (decode dataflow,
// split count, quant format, ...), each with its evidence as owner-defined JSON. Only a new table, so
// a v1 reader can keep using a v2 file (it never sees the table): compatible_version stays 1.
void add_v2_decision_table(Database& db) {
  db.exec(R"sql(
    CREATE TABLE decision (
      kind           TEXT NOT NULL,     -- e.g. "decode_dataflow", "decode_splits", "quant_format"
      key            TEXT NOT NULL,     -- owner-defined, e.g. a canonical spec text
      device         TEXT NOT NULL,     -- DeviceKey::str(); the fields below rebuild the DeviceKey
      toolchain      TEXT NOT NULL,
      device_name    TEXT NOT NULL,
      cc_major       INTEGER NOT NULL,
      cc_minor       INTEGER NOT NULL,
      sm_count       INTEGER NOT NULL,
      driver_version INTEGER NOT NULL,
      json           TEXT NOT NULL,     -- the decision and its evidence
      created_at     INTEGER NOT NULL,  -- unix seconds
      PRIMARY KEY (kind, key, device, toolchain));
  )sql", "create the schema v2 decision table");
}

void create_v2_tables(Database& db) {
  create_v1_tables(db);
  add_v2_decision_table(db);
}

struct Migration {
  int from;
  int to;
  void (*apply)(Database&);
};

// Ordered; each step goes forward. Appending a version means appending a row here.
// An empty file goes straight to the newest layout; older files step forward one version at a time.
const Migration kMigrations[] = {
    {SchemaInfo::kEmpty, 2, create_v2_tables},
    {0, 1, migrate_v0_to_v1},
    {1, 2, add_v2_decision_table},
};

std::set<std::string> user_tables(Database& db) {
  std::set<std::string> names;
  Statement query(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'");
  while (query.step()) names.insert(query.column_text(0));
  return names;
}

int read_meta(Database& db, const char* key) {
  Statement query(db, "SELECT value FROM meta WHERE key = ?");
  query.bind(1, key);
  if (!query.step() || query.column_is_null(0)) {
    throw CacheError("qattn cache: " + db.path() + ": the meta table lacks " + key +
                         ": not a qattn cache, or a damaged one; it was left untouched",
                     0, CacheError::Kind::damaged);
  }
  return static_cast<int>(query.column_int64(0));
}

void write_meta(Database& db, const char* key, int value) {
  Statement upsert(db, "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)");
  upsert.bind(1, key).bind(2, value).run();
}

std::string version_text(const SchemaInfo& info) {
  return info.schema_version == SchemaInfo::kEmpty ? std::string("empty")
                                                   : "v" + std::to_string(info.schema_version);
}

}  // namespace

SchemaInfo inspect_schema(Database& db) {
  std::set<std::string> tables = user_tables(db);
  SchemaInfo info;
  if (tables.count("meta")) {
    info.schema_version = read_meta(db, "schema_version");
    info.compatible_version = read_meta(db, "compatible_version");
  } else if (tables.count("binaries") && tables.count("tuned")) {
    info.schema_version = info.compatible_version = 0;
  } else if (!tables.empty()) {
    std::string names;
    for (const auto& name : tables) names += (names.empty() ? "" : ", ") + name;
    throw CacheError("qattn cache: " + db.path() + ": holds tables (" + names +
                         ") but no qattn meta table: not a qattn cache; it was left untouched, choose another cache path",
                     0, CacheError::Kind::damaged);
  }
  if (info.compatible_version > kSchemaVersion) {
    throw CacheError("qattn cache: " + db.path() + ": schema v" + std::to_string(info.schema_version) +
                     " (needs a reader of v" + std::to_string(info.compatible_version) +
                     " or later) was written by a newer qattn; this one understands v" +
                     std::to_string(kSchemaVersion) +
                         ". The file was left untouched: upgrade qattn or use another cache path",
                     0, CacheError::Kind::future_schema);
  }
  return info;
}

SchemaInfo migrate_to_current(Database& db) {
  SchemaInfo info = inspect_schema(db);
  if (info.schema_version >= kSchemaVersion) return info;   // current, or newer but compatible
  // A read-only reader of an older layout it can read (v1: only the decision table is missing) uses it
  // as it is, so that a shipped cache made by an older qattn keeps working; missing tables read as empty.
  if (db.read_only() && info.schema_version >= kOldestReadOnlyVersion) return info;
  if (db.read_only()) {
    throw CacheError("qattn cache: " + db.path() + ": the database is " + version_text(info) +
                     " and needs schema v" + std::to_string(kSchemaVersion) +
                     ", but it was opened read-only; open it writable once to create or migrate it");
  }
  Transaction transaction(db, Transaction::Mode::immediate);
  info = inspect_schema(db);   // another process may have migrated it while we waited for the lock
  if (info.schema_version >= kSchemaVersion) return info;
  const SchemaInfo original = info;
  while (info.schema_version < kSchemaVersion) {
    const Migration* step = nullptr;
    for (const auto& migration : kMigrations) {
      if (migration.from == info.schema_version) step = &migration;
    }
    if (!step) {
      throw CacheError("qattn cache: " + db.path() + ": no migration from schema " + version_text(info) +
                       "; it was left untouched");
    }
    try {
      step->apply(db);
    } catch (const CacheError& error) {
      std::string inner = error.what();
      const std::string prefix = "qattn cache: " + db.path() + ": ";
      if (inner.compare(0, prefix.size(), prefix) == 0) inner.erase(0, prefix.size());
      throw CacheError("qattn cache: " + db.path() + ": migrating schema " + version_text(original) + " to v" +
                           std::to_string(kSchemaVersion) + " failed and was rolled back: " + inner,
                       error.sqlite_code());
    }
    info.schema_version = step->to;
  }
  write_meta(db, "schema_version", kSchemaVersion);
  write_meta(db, "compatible_version", kCompatibleVersion);
  transaction.commit();
  return SchemaInfo{kSchemaVersion, kCompatibleVersion};
}

}  // namespace qattn::cache

// Versioned layout of the cache database, kept in a `meta` table as schema_version (the layout this
// file has) and compatible_version (the oldest layout a reader must understand to use it safely).
//
// Version history. To change the layout: bump kSchemaVersion, append one forward migration to the
// list in schema.cpp, never edit a released one. Raise kCompatibleVersion only when older qattn
// builds could no longer read or write the file correctly (e.g. a column they insert was removed).
//   0  prototype (qattn 0.0.x): tables `binaries` and `tuned`, no `meta`. Blobs had no checksum, tuned
//      rows no candidate log. Recognised by its `binaries` table; migrated to 1.
//   1  qattn 0.1.0: `meta`; `kernel_binary` (cubin + sha256 + size + resource usage, keyed by
//      binary_key()); `tuned_kernel` (winner per spec/bucket/device/toolchain + every candidate's outcome).
//   2  `decision` (kind, key, device, toolchain -> owner-defined JSON). compatible_version stays 1: the
//      change only adds a table, which a v1 reader never queries, and nothing a v1 reader writes (binaries,
//      tuned rows, clear() of those two tables) breaks an invariant of v2. A v1 file opened read-only
//      (e.g. a shipped cache made by an older qattn) is used without migrating; it has no decisions.
#pragma once

#include "cache/sqlite.hpp"

namespace qattn::cache {

constexpr int kSchemaVersion = 2;
constexpr int kCompatibleVersion = 1;
// The oldest layout a read-only open accepts without migrating (it cannot migrate).
constexpr int kOldestReadOnlyVersion = 1;

struct SchemaInfo {
  static constexpr int kEmpty = -1;   // a new, empty database file
  int schema_version = kEmpty;
  int compatible_version = kEmpty;
};

// Reads the layout of an open database without writing anything. Throws CacheError for a database this
// code must not touch: one written by a newer, incompatible qattn, or one that is not a qattn cache.
SchemaInfo inspect_schema(Database& db);

// Brings an older (or empty) database to kSchemaVersion with every migration in one IMMEDIATE
// transaction: all or nothing, and safe against other processes opening it at the same time. A
// current or newer-but-compatible database is left as it is, and so is a read-only one of at least
// kOldestReadOnlyVersion. Throws CacheError when a migration is
// needed on a read-only database, or when the database must not be touched (see inspect_schema).
SchemaInfo migrate_to_current(Database& db);

}  // namespace qattn::cache

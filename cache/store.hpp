// Store: the SQLite cache of compiled kernel binaries and tuning winners; the only part of cache/ the
// runtime uses. One file, shared safely by the threads of a process (one connection behind a mutex)
// and by several processes (WAL where the file system allows it, a busy timeout, IMMEDIATE write
// transactions, and a bounded retry with backoff on SQLITE_BUSY).
//
// Writes are single short transactions: compile and time first, then put. Nothing stale is served:
// the toolchain is part of both keys, and every cubin is checked against its stored sha256 and size.
#pragma once
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cache/keys.hpp"
#include "cache/schema.hpp"
#include "cache/sqlite.hpp"

namespace qattn::cache {

struct BinaryRecord {
  std::string key;   // binary_key(source, options, arch, toolchain)
  std::string kernel_name, arch, options, toolchain;   // informational: the key already covers them
  std::vector<unsigned char> image;                    // cubin
  int registers = -1, spill_bytes = -1, smem_bytes = 0;
  double compile_ms = 0;
};

struct TunedRecord {
  std::string spec;          // canonical spec text
  std::string bucket;        // problem-size bucket text
  DeviceKey device;
  std::string toolchain;
  std::string kernel_name;   // the winner's full kernel name (spec + tiling)
  std::string binary_key;    // its BinaryRecord key
  double time_us = 0;
  std::string candidates_json;   // every candidate's outcome
  long long created_at = 0;      // unix seconds; 0 on put means "now"
};

// Declared outside Store so that `Options = {}` can be a default argument of Store's constructor
// (a nested struct with member initializers is incomplete there).
struct StoreOptions {
  bool read_only = false;       // never creates, migrates or writes; writes throw CacheError
  int busy_timeout_ms = 10000;  // per attempt; SQLITE_BUSY is then retried a few times with backoff
};

class Store {
 public:
  using Options = StoreOptions;

  struct Stats {
    std::string path;
    int schema_version = 0, compatible_version = 0;
    // "wal", or the fallback SQLite chose (e.g. "delete"); a read-only open of a WAL database in a
    // directory this user cannot write says "... (immutable snapshot: directory not writable)".
    std::string journal_mode;
    bool read_only = false;
    long long binary_count = 0, tuned_count = 0;
    long long binary_bytes = 0;   // sum of stored cubin sizes
    long long file_bytes = 0;     // database file plus its WAL, on disk
    // Counters of this Store object since it was opened.
    long long binary_hits = 0, binary_misses = 0, tuned_hits = 0, tuned_misses = 0;
    long long corrupt_binaries = 0;   // rows that failed the integrity check (dropped unless read-only)
    long long busy_retries = 0;       // SQLITE_BUSY answers retried after backoff
  };

  // Opens (creating the file and its parent directories unless read-only) and migrates the schema.
  // Throws CacheError for a directory, an unreadable or non-SQLite file, a damaged database, a schema
  // from a newer incompatible qattn, or a database of another program; such files are never modified.
  explicit Store(const std::string& path, Options options = {});
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // A row whose image no longer matches its stored sha256/size is a miss: it is deleted (kept when
  // read-only) and a warning is recorded.
  std::optional<BinaryRecord> get_binary(const std::string& key);
  // Idempotent: an existing key is left as it is.
  void put_binary(const BinaryRecord& record);

  std::optional<TunedRecord> get_tuned(const std::string& spec, const std::string& bucket,
                                       const DeviceKey& device, const std::string& toolchain);
  // Keeps the faster of the stored and the new result (the stored one on a tie); true if `record`
  // was stored. time_us must be finite and >= 0.
  bool put_tuned(const TunedRecord& record);
  std::vector<TunedRecord> list_tuned();   // ordered by spec, bucket, device, toolchain

  Stats stats();
  void clear();   // removes every binary and tuned row (schema and meta stay)
  // Warnings recorded so far (e.g. dropped corrupt binaries), oldest first; at most the last 100.
  std::vector<std::string> warnings() const;
  const std::string& path() const { return path_; }

 private:
  template <class Body>
  auto with_busy_retry(Body&& body) -> decltype(body());
  void require_writable(const char* operation) const;
  void warn(std::string message);

  std::string path_;
  Options options_;
  mutable std::mutex mutex_;   // guards everything below
  std::unique_ptr<Database> db_;
  SchemaInfo schema_;
  std::string journal_mode_;
  Stats counters_;             // only the counter fields are used
  std::vector<std::string> warnings_;
};

// $QATTN_CACHE_DIR/qattn.db, else $XDG_CACHE_HOME/qattn/qattn.db, else ~/.cache/qattn/qattn.db
// (empty variables count as unset, as does a relative XDG_CACHE_HOME, per the XDG spec).
std::string default_cache_path();

}  // namespace qattn::cache

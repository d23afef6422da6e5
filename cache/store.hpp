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

// A small per-device choice made by another part of qattn (schema v2 table `decision`), e.g. which
// decode dataflow or split count won on this GPU, with the evidence that decided it.
struct DecisionRecord {
  std::string kind;          // e.g. "decode_dataflow", "decode_splits", "quant_format"
  std::string key;           // owner-defined, e.g. a canonical spec text without flow=
  DeviceKey device;
  std::string toolchain;
  std::string json;          // the decision and its evidence (owner-defined JSON)
  long long created_at = 0;  // unix seconds; 0 on put means "now"
};

// The answer of a tuned-winner lookup that also says why it missed, so that a mismatch is never
// silent. For other_driver, `record` is the entry measured on the same model/cc/SM count under another
// driver: its tiling is worth re-validating on this device instead of re-tuning from scratch.
struct TunedLookup {
  enum class Status {
    hit,              // exact match: record is the winner
    other_driver,     // same device model, cc, SM count and toolchain, another driver: record set
    other_toolchain,  // entries for this device under another NVRTC/qattn/templates toolchain only
    other_device,     // entries for this spec and bucket on other devices only
    absent,           // nothing for this spec and bucket
  };
  Status status = Status::absent;
  std::optional<TunedRecord> record;
  std::string reason;   // one line for every status but hit: what was found instead
  std::string source;   // path of the database that answered (LayeredStore: the layer the record is from)
};
const char* to_string(TunedLookup::Status status);

// Declared outside Store so that `Options = {}` can be a default argument of Store's constructor
// (a nested struct with member initializers is incomplete there).
struct StoreOptions {
  bool read_only = false;       // never creates, migrates or writes; writes throw CacheError
  // The most one operation (an open, a lookup, a write transaction) waits for another process's lock,
  // retries included; then it fails with CacheError::Kind::busy (see docs/reliability.md).
  int busy_timeout_ms = 10000;
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
    long long binary_count = 0, tuned_count = 0, decision_count = 0;
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
  // get_tuned that explains a miss (see TunedLookup); counts a hit or a miss like get_tuned.
  TunedLookup lookup_tuned(const std::string& spec, const std::string& bucket, const DeviceKey& device,
                           const std::string& toolchain);

  // Decisions (schema v2). A read-only v1 file has no decision table: get finds nothing, list is empty.
  std::optional<DecisionRecord> get_decision(const std::string& kind, const std::string& key,
                                             const DeviceKey& device, const std::string& toolchain);
  // Replaces an existing row of the same (kind, key, device, toolchain), in one transaction. kind, key,
  // toolchain and json must be non-empty; json is stored as given (its owner defines and parses it).
  void put_decision(const DecisionRecord& record);
  // Every decision, or those of one kind; ordered by kind, key, device, toolchain.
  std::vector<DecisionRecord> list_decisions(const std::string& kind = "");

  Stats stats();
  void clear();   // removes every binary, tuned and decision row (schema and meta stay)
  // Warnings recorded so far (e.g. dropped corrupt binaries), oldest first; at most the last 100.
  std::vector<std::string> warnings() const;
  const std::string& path() const { return path_; }
  bool read_only() const { return options_.read_only; }

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
  bool has_decision_table_ = false;   // false only for a v1 file opened read-only
  std::string journal_mode_;
  Stats counters_;             // only the counter fields are used
  std::vector<std::string> warnings_;
};

// $QATTN_CACHE_DIR/qattn.db, else $XDG_CACHE_HOME/qattn/qattn.db, else ~/.cache/qattn/qattn.db
// (empty variables count as unset, as does a relative XDG_CACHE_HOME, per the XDG spec).
std::string default_cache_path();

}  // namespace qattn::cache

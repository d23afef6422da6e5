#include "cache/store.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <unistd.h>

#include "cache/digest.hpp"
#include "cache/log.hpp"

namespace qattn::cache {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMaxWarnings = 100;

long long unix_now() { return static_cast<long long>(std::time(nullptr)); }

long long file_size_or_zero(const std::string& path) {
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  return ec ? 0 : static_cast<long long>(size);
}

void create_parent_directories(const std::string& path) {
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec || !fs::is_directory(parent)) {
    throw CacheError("qattn cache: " + path + ": cannot create the cache directory " + parent.string() + ": " +
                     (ec ? ec.message() : std::string("a file of that name is in the way")));
  }
}

std::uint32_t big_endian_32(const unsigned char* bytes) {
  return (std::uint32_t(bytes[0]) << 24) | (std::uint32_t(bytes[1]) << 16) | (std::uint32_t(bytes[2]) << 8) | bytes[3];
}

// SQLite reads pages lazily, so a file cut short (an interrupted copy, a full disk) can open fine and
// fail at some later query. Its header records the page count (valid while bytes 92..95 equal the change
// counter at 24..27): a file shorter than that is truncated. Skipped while a WAL holds pages.
void check_not_truncated(const std::string& path) {
  std::error_code ec;
  if (fs::file_size(path + "-wal", ec) > 0 && !ec) return;
  std::ifstream in(path, std::ios::binary);
  unsigned char header[100];
  if (!in.read(reinterpret_cast<char*>(header), sizeof header)) return;   // new or tiny: SQLite judges it
  if (std::memcmp(header, "SQLite format 3", 16) != 0) return;
  const std::uint32_t page_size = header[16] == 0 && header[17] == 1 ? 65536u : (header[16] << 8) | header[17];
  const std::uint32_t pages = big_endian_32(header + 28);
  if (pages == 0 || big_endian_32(header + 24) != big_endian_32(header + 92)) return;
  const unsigned long long expected = static_cast<unsigned long long>(pages) * page_size;
  const auto actual = fs::file_size(path, ec);
  if (!ec && actual < expected) {
    throw CacheError("qattn cache: " + path + ": the file is truncated: its header counts " + std::to_string(pages) +
                         " pages of " + std::to_string(page_size) + " bytes, the file has " + std::to_string(actual) +
                         " bytes; it was left untouched",
                     0, CacheError::Kind::damaged);
  }
}

const char* kSelectTuned =
    "SELECT spec, bucket, device_name, cc_major, cc_minor, sm_count, driver_version, toolchain, kernel_name, "
    "binary_key, time_us, candidates_json, created_at FROM tuned_kernel";

// The five DeviceKey columns (name, cc_major, cc_minor, sm_count, driver_version) from `first` on.
DeviceKey read_device(const Statement& row, int first) {
  DeviceKey device;
  device.name = row.column_text(first);
  device.cc_major = static_cast<int>(row.column_int64(first + 1));
  device.cc_minor = static_cast<int>(row.column_int64(first + 2));
  device.sm_count = static_cast<int>(row.column_int64(first + 3));
  device.driver_version = static_cast<int>(row.column_int64(first + 4));
  return device;
}

TunedRecord read_tuned_row(const Statement& row) {
  TunedRecord record;
  record.spec = row.column_text(0);
  record.bucket = row.column_text(1);
  record.device = read_device(row, 2);
  record.toolchain = row.column_text(7);
  record.kernel_name = row.column_text(8);
  record.binary_key = row.column_text(9);
  record.time_us = row.column_double(10);
  record.candidates_json = row.column_text(11);
  record.created_at = row.column_int64(12);
  return record;
}

const char* kSelectDecision =
    "SELECT kind, key, device_name, cc_major, cc_minor, sm_count, driver_version, toolchain, json, created_at "
    "FROM decision";

DecisionRecord read_decision_row(const Statement& row) {
  DecisionRecord record;
  record.kind = row.column_text(0);
  record.key = row.column_text(1);
  record.device = read_device(row, 2);
  record.toolchain = row.column_text(7);
  record.json = row.column_text(8);
  record.created_at = row.column_int64(9);
  return record;
}

bool has_table(Database& db, const char* name) {
  Statement query(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
  query.bind(1, name);
  return query.step();
}

bool same_model(const DeviceKey& a, const DeviceKey& b) {
  return a.name == b.name && a.cc_major == b.cc_major && a.cc_minor == b.cc_minor && a.sm_count == b.sm_count;
}

// Sorts the stored rows of one spec and bucket (newest first) into the most useful answer: an exact hit,
// then the same device under another driver (its tiling can be re-validated), then the reasons to re-tune.
TunedLookup classify_tuned(const std::vector<TunedRecord>& rows, const std::string& spec, const std::string& bucket,
                           const DeviceKey& device, const std::string& toolchain) {
  TunedLookup lookup;
  const std::string what = "tuned winner of " + spec + " for " + bucket;
  const TunedRecord* other_driver = nullptr;
  const TunedRecord* other_toolchain = nullptr;
  for (const TunedRecord& row : rows) {
    if (row.device == device && row.toolchain == toolchain) {
      lookup.status = TunedLookup::Status::hit;
      lookup.record = row;
      return lookup;
    }
    if (!same_model(row.device, device)) continue;
    if (row.toolchain == toolchain) {
      if (!other_driver) other_driver = &row;
    } else if (!other_toolchain) {
      other_toolchain = &row;
    }
  }
  if (other_driver) {
    lookup.status = TunedLookup::Status::other_driver;
    lookup.record = *other_driver;
    lookup.reason = what + " was measured under driver " + std::to_string(other_driver->device.driver_version) +
                    ", this device runs driver " + std::to_string(device.driver_version);
  } else if (other_toolchain) {
    lookup.status = TunedLookup::Status::other_toolchain;
    lookup.reason = what + " on this device was made by toolchain '" + other_toolchain->toolchain +
                    "', this is '" + toolchain + "'";
  } else if (!rows.empty()) {
    lookup.status = TunedLookup::Status::other_device;
    lookup.reason = what + " exists only for other devices (" + std::to_string(rows.size()) + ", e.g. " +
                    rows.front().device.str() + "), this is " + device.str();
  } else {
    lookup.reason = "no " + what + " on any device";
  }
  return lookup;
}

void require_non_empty(const DecisionRecord& record) {
  if (record.kind.empty() || record.key.empty() || record.toolchain.empty() || record.json.empty()) {
    throw std::invalid_argument("put_decision: kind, key, toolchain and json must all be non-empty (kind '" +
                                record.kind + "', key '" + record.key + "')");
  }
}

}  // namespace

const char* to_string(TunedLookup::Status status) {
  switch (status) {
    case TunedLookup::Status::hit: return "hit";
    case TunedLookup::Status::other_driver: return "other_driver";
    case TunedLookup::Status::other_toolchain: return "other_toolchain";
    case TunedLookup::Status::other_device: return "other_device";
    case TunedLookup::Status::absent: return "absent";
  }
  return "unknown";
}

namespace {

// Anything but a regular file is refused before it is opened: reading a FIFO blocks until a writer comes,
// a device (/dev/full, /dev/zero) is no place for a database. A missing file is created later.
void require_regular_or_missing(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status) || fs::is_regular_file(status)) return;
  const char* what = fs::is_directory(status) ? "a directory" : fs::is_fifo(status) ? "a FIFO"
                     : fs::is_character_file(status) ? "a character device" : fs::is_block_file(status) ? "a block device"
                     : "not a regular file";
  throw CacheError("qattn cache: " + path + ": is " + std::string(what) + "; a cache must be a regular file", 0,
                   CacheError::Kind::not_a_cache);
}

}  // namespace

// One operation (a whole transaction, or the open) waits at most options_.busy_timeout_ms in total for
// another connection's lock: SQLite's busy handler gets what is left of that budget on each attempt,
// and SQLITE_BUSY that comes back early (e.g. while another connection recovers a WAL) is retried after
// a short jittered, doubling delay until the budget is spent. Then the last CacheError (Kind::busy) is
// thrown with the wait added; LayeredStore stops using the layer after it (docs/reliability.md).
template <class Body>
auto Store::with_busy_retry(Body&& body) -> decltype(body()) {
  using Clock = std::chrono::steady_clock;
  thread_local std::minstd_rand jitter(static_cast<unsigned>(::getpid()) * 7919u +
                                       static_cast<unsigned>(std::hash<std::thread::id>()(std::this_thread::get_id())));
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(std::max(0, options_.busy_timeout_ms));
  std::chrono::milliseconds delay(2);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (db_) db_->set_busy_timeout(static_cast<int>(std::max<long long>(0, left.count())));
    try {
      return body();
    } catch (const CacheError& error) {
      if (!error.is_busy()) throw;
      const auto now = Clock::now();
      if (now + delay >= deadline) {
        const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count();
        throw CacheError(std::string(error.what()) + " [waited " + std::to_string(waited) + " ms in all, the limit " +
                             "of one operation]",
                         error.sqlite_code(), CacheError::Kind::busy);
      }
      ++counters_.busy_retries;
      std::this_thread::sleep_for(delay + std::chrono::milliseconds(jitter() % (delay.count() + 1)));
      delay = std::min(delay * 2, std::chrono::milliseconds(500));
    }
  }
}

Store::Store(const std::string& path, Options options) : path_(path), options_(options) {
  if (path_.empty()) throw CacheError("qattn cache: empty database path");
  require_regular_or_missing(path_);
  if (!options_.read_only) create_parent_directories(path_);
  check_not_truncated(path_);
  std::lock_guard<std::mutex> lock(mutex_);
  const auto open_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.busy_timeout_ms);
  with_busy_retry([&] {
    Database::Options open_options;
    open_options.read_only = options_.read_only;
    // What is left of the operation's budget (with_busy_retry has no connection to lower it on yet).
    open_options.busy_timeout_ms = static_cast<int>(std::max<long long>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(open_deadline - std::chrono::steady_clock::now())
               .count()));
    auto db = std::make_unique<Database>(path_, open_options);
    // Refuse a foreign or too-new database before anything (even the journal mode) is written.
    inspect_schema(*db);
    journal_mode_ = db->enable_wal() + (db->immutable() ? " (immutable snapshot: directory not writable)" : "");
    schema_ = migrate_to_current(*db);
    has_decision_table_ = has_table(*db, "decision");
    db_ = std::move(db);
  });
}

Store::~Store() = default;

void Store::require_writable(const char* operation) const {
  if (options_.read_only) {
    throw CacheError("qattn cache: " + path_ + ": " + operation + " refused: the cache was opened read-only");
  }
}

void Store::warn(std::string message) {
  log_once(message);
  if (warnings_.size() == kMaxWarnings) warnings_.erase(warnings_.begin());
  warnings_.push_back(std::move(message));
}

std::vector<std::string> Store::warnings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return warnings_;
}

std::optional<BinaryRecord> Store::get_binary(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return with_busy_retry([&]() -> std::optional<BinaryRecord> {
    BinaryRecord record;
    std::string stored_sha256;
    long long stored_size = 0;
    {
      // Scoped: the read must be finished before a write transaction starts on this connection.
      Statement query(*db_, "SELECT kernel_name, arch, options, toolchain, image, image_size, image_sha256, "
                            "registers, spill_bytes, smem_bytes, compile_ms FROM kernel_binary WHERE key = ?");
      query.bind(1, key);
      if (!query.step()) {
        ++counters_.binary_misses;
        return std::nullopt;
      }
      record.key = key;
      record.kernel_name = query.column_text(0);
      record.arch = query.column_text(1);
      record.options = query.column_text(2);
      record.toolchain = query.column_text(3);
      record.image = query.column_blob(4);
      stored_size = query.column_int64(5);
      stored_sha256 = query.column_text(6);
      record.registers = static_cast<int>(query.column_int64(7));
      record.spill_bytes = static_cast<int>(query.column_int64(8));
      record.smem_bytes = static_cast<int>(query.column_int64(9));
      record.compile_ms = query.column_double(10);
    }
    const bool intact = static_cast<long long>(record.image.size()) == stored_size &&
                        sha256_hex(record.image.data(), record.image.size()) == stored_sha256;
    if (intact) {
      ++counters_.binary_hits;
      return record;
    }
    ++counters_.binary_misses;
    ++counters_.corrupt_binaries;
    std::string what = "qattn cache: " + path_ + ": binary " + key + " (" + record.kernel_name +
                       ") failed its integrity check (stored " + std::to_string(stored_size) + " bytes, sha256 " +
                       stored_sha256.substr(0, 12) + "...; found " + std::to_string(record.image.size()) + " bytes)";
    if (options_.read_only) {
      warn(what + "; ignored it (read-only cache)");
      return std::nullopt;
    }
    Transaction transaction(*db_);
    // Matching the image too: a row another process has just replaced with a good one stays.
    Statement drop(*db_, "DELETE FROM kernel_binary WHERE key = ? AND image = ?");
    drop.bind(1, key).bind_blob(2, record.image.data(), record.image.size()).run();
    transaction.commit();
    warn(what + "; dropped it, it will be rebuilt");
    return std::nullopt;
  });
}

void Store::put_binary(const BinaryRecord& record) {
  require_writable("put_binary");
  if (record.key.empty()) throw std::invalid_argument("put_binary: the record has an empty key");
  if (record.image.empty()) throw std::invalid_argument("put_binary: binary " + record.key + " has an empty image");
  const std::string image_sha256 = sha256_hex(record.image.data(), record.image.size());
  std::lock_guard<std::mutex> lock(mutex_);
  with_busy_retry([&] {
    Transaction transaction(*db_);
    Statement insert(*db_, "INSERT OR IGNORE INTO kernel_binary (key, kernel_name, arch, options, toolchain, image, "
                           "image_size, image_sha256, registers, spill_bytes, smem_bytes, compile_ms, created_at) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    insert.bind(1, record.key).bind(2, record.kernel_name).bind(3, record.arch).bind(4, record.options);
    insert.bind(5, record.toolchain).bind_blob(6, record.image.data(), record.image.size());
    insert.bind(7, static_cast<long long>(record.image.size())).bind(8, image_sha256);
    insert.bind(9, record.registers).bind(10, record.spill_bytes).bind(11, record.smem_bytes);
    insert.bind(12, record.compile_ms).bind(13, unix_now());
    insert.run();
    transaction.commit();
  });
}

std::optional<TunedRecord> Store::get_tuned(const std::string& spec, const std::string& bucket,
                                            const DeviceKey& device, const std::string& toolchain) {
  std::lock_guard<std::mutex> lock(mutex_);
  return with_busy_retry([&]() -> std::optional<TunedRecord> {
    Statement query(*db_, std::string(kSelectTuned) +
                              " WHERE spec = ? AND bucket = ? AND device = ? AND toolchain = ?");
    query.bind(1, spec).bind(2, bucket).bind(3, device.str()).bind(4, toolchain);
    if (!query.step()) {
      ++counters_.tuned_misses;
      return std::nullopt;
    }
    ++counters_.tuned_hits;
    return read_tuned_row(query);
  });
}

bool Store::put_tuned(const TunedRecord& record) {
  require_writable("put_tuned");
  if (!std::isfinite(record.time_us) || record.time_us < 0) {
    throw std::invalid_argument("put_tuned: time_us of " + record.kernel_name + " must be finite and >= 0, got " +
                                std::to_string(record.time_us));
  }
  if (record.spec.empty() || record.bucket.empty() || record.toolchain.empty() || record.kernel_name.empty()) {
    throw std::invalid_argument("put_tuned: spec, bucket, toolchain and kernel_name must all be non-empty");
  }
  const std::string device = record.device.str();
  const long long created_at = record.created_at != 0 ? record.created_at : unix_now();
  std::lock_guard<std::mutex> lock(mutex_);
  return with_busy_retry([&] {
    Transaction transaction(*db_);   // IMMEDIATE: the compare and the write see the same row
    {
      Statement existing(*db_, "SELECT time_us FROM tuned_kernel WHERE spec = ? AND bucket = ? AND device = ? "
                               "AND toolchain = ?");
      existing.bind(1, record.spec).bind(2, record.bucket).bind(3, device).bind(4, record.toolchain);
      if (existing.step() && existing.column_double(0) <= record.time_us) return false;
    }
    Statement upsert(*db_, "INSERT OR REPLACE INTO tuned_kernel (spec, bucket, device, toolchain, device_name, "
                           "cc_major, cc_minor, sm_count, driver_version, kernel_name, binary_key, time_us, "
                           "candidates_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    upsert.bind(1, record.spec).bind(2, record.bucket).bind(3, device).bind(4, record.toolchain);
    upsert.bind(5, record.device.name).bind(6, record.device.cc_major).bind(7, record.device.cc_minor);
    upsert.bind(8, record.device.sm_count).bind(9, record.device.driver_version);
    upsert.bind(10, record.kernel_name).bind(11, record.binary_key).bind(12, record.time_us);
    upsert.bind(13, record.candidates_json).bind(14, created_at);
    upsert.run();
    transaction.commit();
    return true;
  });
}

std::vector<TunedRecord> Store::list_tuned() {
  std::lock_guard<std::mutex> lock(mutex_);
  return with_busy_retry([&] {
    std::vector<TunedRecord> records;
    Statement query(*db_, std::string(kSelectTuned) + " ORDER BY spec, bucket, device, toolchain");
    while (query.step()) records.push_back(read_tuned_row(query));
    return records;
  });
}

TunedLookup Store::lookup_tuned(const std::string& spec, const std::string& bucket, const DeviceKey& device,
                                const std::string& toolchain) {
  std::vector<TunedRecord> rows;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rows = with_busy_retry([&] {
      std::vector<TunedRecord> found;
      Statement query(*db_, std::string(kSelectTuned) +
                                " WHERE spec = ? AND bucket = ? ORDER BY created_at DESC, device, toolchain");
      query.bind(1, spec).bind(2, bucket);
      while (query.step()) found.push_back(read_tuned_row(query));
      return found;
    });
  }
  TunedLookup lookup = classify_tuned(rows, spec, bucket, device, toolchain);
  lookup.source = path_;
  std::lock_guard<std::mutex> lock(mutex_);
  ++(lookup.status == TunedLookup::Status::hit ? counters_.tuned_hits : counters_.tuned_misses);
  return lookup;
}

std::optional<DecisionRecord> Store::get_decision(const std::string& kind, const std::string& key,
                                                  const DeviceKey& device, const std::string& toolchain) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!has_decision_table_) return std::nullopt;
  return with_busy_retry([&]() -> std::optional<DecisionRecord> {
    Statement query(*db_, std::string(kSelectDecision) +
                              " WHERE kind = ? AND key = ? AND device = ? AND toolchain = ?");
    query.bind(1, kind).bind(2, key).bind(3, device.str()).bind(4, toolchain);
    if (!query.step()) return std::nullopt;
    return read_decision_row(query);
  });
}

void Store::put_decision(const DecisionRecord& record) {
  require_writable("put_decision");
  require_non_empty(record);
  const long long created_at = record.created_at != 0 ? record.created_at : unix_now();
  std::lock_guard<std::mutex> lock(mutex_);
  with_busy_retry([&] {
    Transaction transaction(*db_);
    Statement upsert(*db_, "INSERT OR REPLACE INTO decision (kind, key, device, toolchain, device_name, cc_major, "
                           "cc_minor, sm_count, driver_version, json, created_at) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    upsert.bind(1, record.kind).bind(2, record.key).bind(3, record.device.str()).bind(4, record.toolchain);
    upsert.bind(5, record.device.name).bind(6, record.device.cc_major).bind(7, record.device.cc_minor);
    upsert.bind(8, record.device.sm_count).bind(9, record.device.driver_version);
    upsert.bind(10, record.json).bind(11, created_at);
    upsert.run();
    transaction.commit();
  });
}

std::vector<DecisionRecord> Store::list_decisions(const std::string& kind) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!has_decision_table_) return {};
  return with_busy_retry([&] {
    std::vector<DecisionRecord> records;
    Statement query(*db_, std::string(kSelectDecision) + (kind.empty() ? "" : " WHERE kind = ?") +
                              " ORDER BY kind, key, device, toolchain");
    if (!kind.empty()) query.bind(1, kind);
    while (query.step()) records.push_back(read_decision_row(query));
    return records;
  });
}

Store::Stats Store::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats stats = counters_;
  stats.path = path_;
  stats.schema_version = schema_.schema_version;
  stats.compatible_version = schema_.compatible_version;
  stats.journal_mode = journal_mode_;
  stats.read_only = options_.read_only;
  with_busy_retry([&] {
    Transaction snapshot(*db_, Transaction::Mode::deferred);   // both counts from one snapshot
    Statement binaries(*db_, "SELECT count(*), coalesce(sum(image_size), 0) FROM kernel_binary");
    binaries.step();
    stats.binary_count = binaries.column_int64(0);
    stats.binary_bytes = binaries.column_int64(1);
    Statement tuned(*db_, "SELECT count(*) FROM tuned_kernel");
    tuned.step();
    stats.tuned_count = tuned.column_int64(0);
    if (has_decision_table_) {
      Statement decisions(*db_, "SELECT count(*) FROM decision");
      decisions.step();
      stats.decision_count = decisions.column_int64(0);
    }
  });
  stats.file_bytes = file_size_or_zero(path_) + file_size_or_zero(path_ + "-wal");
  return stats;
}

void Store::clear() {
  require_writable("clear");
  std::lock_guard<std::mutex> lock(mutex_);
  with_busy_retry([&] {
    Transaction transaction(*db_);
    db_->exec("DELETE FROM kernel_binary; DELETE FROM tuned_kernel; DELETE FROM decision;", "clear the cache tables");
    transaction.commit();
  });
}

}  // namespace qattn::cache

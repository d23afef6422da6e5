#include "cache/store.hpp"

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <unistd.h>

#include "cache/digest.hpp"

namespace qattn::cache {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxBusyAttempts = 8;
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

const char* kSelectTuned =
    "SELECT spec, bucket, device_name, cc_major, cc_minor, sm_count, driver_version, toolchain, kernel_name, "
    "binary_key, time_us, candidates_json, created_at FROM tuned_kernel";

TunedRecord read_tuned_row(const Statement& row) {
  TunedRecord record;
  record.spec = row.column_text(0);
  record.bucket = row.column_text(1);
  record.device.name = row.column_text(2);
  record.device.cc_major = static_cast<int>(row.column_int64(3));
  record.device.cc_minor = static_cast<int>(row.column_int64(4));
  record.device.sm_count = static_cast<int>(row.column_int64(5));
  record.device.driver_version = static_cast<int>(row.column_int64(6));
  record.toolchain = row.column_text(7);
  record.kernel_name = row.column_text(8);
  record.binary_key = row.column_text(9);
  record.time_us = row.column_double(10);
  record.candidates_json = row.column_text(11);
  record.created_at = row.column_int64(12);
  return record;
}

}  // namespace

// SQLITE_BUSY can still come back after the busy timeout (or without it, e.g. while another
// connection recovers a WAL); a bounded number of retries with jittered, doubling delays absorbs
// those bursts without ever spinning forever. The body must be a whole transaction, so that a retry
// starts it afresh.
template <class Body>
auto Store::with_busy_retry(Body&& body) -> decltype(body()) {
  thread_local std::minstd_rand jitter(static_cast<unsigned>(::getpid()) * 7919u +
                                       static_cast<unsigned>(std::hash<std::thread::id>()(std::this_thread::get_id())));
  std::chrono::milliseconds delay(2);
  for (int attempt = 1;; ++attempt) {
    try {
      return body();
    } catch (const CacheError& error) {
      if (!error.is_busy() || attempt == kMaxBusyAttempts) throw;
      ++counters_.busy_retries;
      std::this_thread::sleep_for(delay + std::chrono::milliseconds(jitter() % (delay.count() + 1)));
      delay = std::min(delay * 2, std::chrono::milliseconds(500));
    }
  }
}

Store::Store(const std::string& path, Options options) : path_(path), options_(options) {
  if (path_.empty()) throw CacheError("qattn cache: empty database path");
  if (!options_.read_only) create_parent_directories(path_);
  std::lock_guard<std::mutex> lock(mutex_);
  with_busy_retry([&] {
    Database::Options open_options;
    open_options.read_only = options_.read_only;
    open_options.busy_timeout_ms = options_.busy_timeout_ms;
    auto db = std::make_unique<Database>(path_, open_options);
    // Refuse a foreign or too-new database before anything (even the journal mode) is written.
    inspect_schema(*db);
    journal_mode_ = db->enable_wal() + (db->immutable() ? " (immutable snapshot: directory not writable)" : "");
    schema_ = migrate_to_current(*db);
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
  });
  stats.file_bytes = file_size_or_zero(path_) + file_size_or_zero(path_ + "-wal");
  return stats;
}

void Store::clear() {
  require_writable("clear");
  std::lock_guard<std::mutex> lock(mutex_);
  with_busy_retry([&] {
    Transaction transaction(*db_);
    db_->exec("DELETE FROM kernel_binary; DELETE FROM tuned_kernel;", "clear the cache tables");
    transaction.commit();
  });
}

}  // namespace qattn::cache

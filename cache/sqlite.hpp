// A thin RAII layer over the SQLite C API: Database, Statement (values are only ever bound, never
// spliced into SQL text) and Transaction (BEGIN IMMEDIATE by default). Every failure throws CacheError
// with one line naming the file, the operation and SQLite's message plus the likely cause.
//
// Not thread-safe by itself: one Database (and its Statements) must be used by one thread at a time;
// Store serializes access with a mutex.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;

namespace qattn::cache {

class CacheError : public std::runtime_error {
 public:
  // What kind of trouble, for callers that decide what to do about an unusable file (open_layer.hpp).
  enum class Kind {
    other,
    damaged,         // corrupt, truncated, not SQLite, or SQLite but not a qattn cache
    future_schema,   // written by a newer qattn this one cannot read safely
    busy,            // locked by another connection past the busy timeout
    unwritable,      // read-only file or directory, permission denied
    not_a_cache,     // an existing file that is not a qattn cache (not a regular file, or another
                     // program's data): never renamed or written, refused (bad input) when named explicitly
  };
  explicit CacheError(const std::string& message, int sqlite_code = 0, Kind kind = Kind::other)
      : std::runtime_error(message), sqlite_code_(sqlite_code), kind_(kind) {}
  // The extended SQLite result code behind the error, 0 when it did not come from SQLite.
  int sqlite_code() const { return sqlite_code_; }
  // SQLITE_BUSY / SQLITE_LOCKED: another connection held a lock past the busy timeout; retrying may help.
  bool is_busy() const;
  // The kind given at the throw, else the one the SQLite code implies.
  Kind kind() const;

 private:
  int sqlite_code_;
  Kind kind_;
};

// A connection. Opening checks the path (directory, missing, unreadable, unwritable), reads the file
// header so a non-SQLite file fails at once, and sets synchronous=NORMAL (durable enough for a cache,
// and no fsync per commit under WAL).
class Database {
 public:
  struct Options {
    bool read_only = false;      // SQLITE_OPEN_READONLY; the file must already exist
    bool create = true;          // create the file when missing (ignored when read_only)
    int busy_timeout_ms = 10000; // how long a statement waits for another connection's lock
  };

  Database(const std::string& path, const Options& options);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Runs SQL that binds no values (DDL, BEGIN/COMMIT, pragmas with constant arguments). `what` names
  // the operation in error messages.
  void exec(std::string_view sql, std::string_view what);

  // Asks for WAL (except read-only or on a network file system, where WAL is unsafe) and reports the
  // journal mode SQLite actually uses: "wal", or e.g. "delete" where the VFS refused it.
  std::string enable_wal();
  std::string journal_mode();

  // How long the next statements wait for another connection's lock (sqlite3_busy_timeout).
  void set_busy_timeout(int ms);
  long long changes() const;   // rows changed by the last INSERT/UPDATE/DELETE
  bool in_transaction() const;
  bool read_only() const { return read_only_; }
  // True when a read-only open fell back to an immutable snapshot (a WAL database in a directory this
  // user cannot write, see the constructor): reads work, but later writes by others are not seen.
  bool immutable() const { return immutable_; }
  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_; }

  // Builds the one-line error for a failed SQLite call on this connection and throws it.
  [[noreturn]] void fail(std::string_view operation, int rc) const;

 private:
  void open_and_probe(const std::string& filename, int flags, int busy_timeout_ms);

  sqlite3* db_ = nullptr;
  std::string path_;
  bool read_only_ = false;
  bool immutable_ = false;
};

class Statement {
 public:
  Statement(Database& db, std::string_view sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters are 1-based, as in SQLite. Text and blobs are copied (SQLITE_TRANSIENT).
  Statement& bind(int index, long long value);
  Statement& bind(int index, int value) { return bind(index, static_cast<long long>(value)); }
  Statement& bind(int index, double value);
  Statement& bind(int index, std::string_view text);
  Statement& bind(int index, const char* text) { return bind(index, std::string_view(text)); }
  Statement& bind_blob(int index, const void* data, std::size_t size);
  Statement& bind_null(int index);

  // Advances: true when a row is available, false when the statement is done.
  bool step();
  // Runs a statement expected to return no rows.
  void run();
  void reset();   // rewinds and clears bindings, ready for reuse

  // Columns are 0-based, as in SQLite.
  bool column_is_null(int column) const;
  long long column_int64(int column) const;
  double column_double(int column) const;
  std::string column_text(int column) const;
  std::vector<unsigned char> column_blob(int column) const;
  int column_count() const;

 private:
  void check_bind(int rc, int index);

  Database& db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
};

// Begins in the constructor; rolls back in the destructor unless commit() was called. IMMEDIATE takes
// the write lock up front, so a transaction that reads and then writes never deadlocks into SQLITE_BUSY
// halfway through (which DEFERRED can do under WAL).
class Transaction {
 public:
  enum class Mode { deferred, immediate, exclusive };
  explicit Transaction(Database& db, Mode mode = Mode::immediate);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Database& db_;
  bool done_ = false;
};

}  // namespace qattn::cache

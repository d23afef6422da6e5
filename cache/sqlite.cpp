#include "cache/sqlite.hpp"

#include <sqlite3.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

namespace qattn::cache {
namespace {

namespace fs = std::filesystem;

// The usual reason behind each primary result code, phrased for someone who only sees the log line.
const char* likely_cause(int primary_code) {
  switch (primary_code) {
    case SQLITE_BUSY:
      return "another process or thread held the database lock longer than the busy timeout";
    case SQLITE_LOCKED:
      return "a conflicting operation on the same connection";
    case SQLITE_NOTADB:
      return "the file is not a SQLite database; it was left untouched: move it away or choose another cache path";
    case SQLITE_CORRUPT:
      return "the database file is damaged; it was left untouched: move it away and a fresh cache will be created";
    case SQLITE_CANTOPEN:
      return "the file or its directory cannot be opened: check that it exists, is a regular file and is accessible";
    case SQLITE_READONLY:
      return "the database cannot be written: it was opened read-only, or the file or its directory is not writable";
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return "permission denied";
    case SQLITE_FULL:
      return "the disk is full";
    case SQLITE_IOERR:
      return "an I/O error: failing disk, or a network file system without working locks";
    case SQLITE_PROTOCOL:
      return "the locking protocol failed: network file systems cannot be shared safely between processes";
    case SQLITE_MISUSE:
      return "SQLite API misuse: a bug in qattn";
    default:
      return nullptr;
  }
}

// Error text must stay on one line (it ends up in single-line logs and exception messages).
std::string one_line(std::string_view text, std::size_t max_chars = 400) {
  std::string out;
  out.reserve(std::min(text.size(), max_chars));
  bool last_space = false;
  for (char c : text) {
    bool space = std::isspace(static_cast<unsigned char>(c)) != 0;
    if (space && last_space) continue;
    out.push_back(space ? ' ' : c);
    last_space = space;
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string describe_sql(std::string_view sql) { return "`" + one_line(sql, 60) + "`"; }

[[noreturn]] void throw_error(const std::string& path, std::string_view operation, std::string_view detail,
                              int code, CacheError::Kind kind = CacheError::Kind::other) {
  std::string message = "qattn cache: " + path + ": " + std::string(operation) + " failed";
  if (!detail.empty()) message += ": " + one_line(detail);
  if (code == SQLITE_BUSY_SNAPSHOT) {
    message += " (a read transaction tried to write after another connection committed: writes must use BEGIN IMMEDIATE)";
  } else if (code != 0) {
    if (const char* cause = likely_cause(code & 0xff)) message += " (" + std::string(cause) + ")";
  }
  throw CacheError(message, code, kind);
}

// SQLite's own messages for these cases are vague ("unable to open database file"), and a
// read-write open of a read-only file silently falls back to read-only; check up front instead.
void check_path_before_open(const std::string& path, const Database::Options& options) {
  if (path.empty()) throw CacheError("qattn cache: empty database path");
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    throw_error(path, "inspect the database path", ec.message(), 0);
  }
  if (!fs::exists(status)) {
    if (options.read_only || !options.create) {
      throw_error(path, "open", "the file does not exist (a read-only cache is never created)", 0);
    }
    return;
  }
  if (fs::is_directory(status)) {
    throw_error(path, "open", "the path is a directory, expected a SQLite database file", 0);
  }
  if (!fs::is_regular_file(status)) {
    throw_error(path, "open", "the path is not a regular file, expected a SQLite database file", 0);
  }
  if (::access(path.c_str(), R_OK) != 0) {
    throw_error(path, "open", "the file is not readable (permission denied)", 0);
  }
  if (!options.read_only && ::access(path.c_str(), W_OK) != 0) {
    throw_error(path, "open for writing",
                "the file is not writable (permission denied); open the cache read-only instead", 0,
                CacheError::Kind::unwritable);
  }
}

// WAL needs shared memory between the processes and working locks: "WAL does not work over a network
// filesystem" (sqlite.org/wal.html). Magic numbers from linux/magic.h.
bool on_network_filesystem(const std::string& path) {
  struct statfs info {};
  if (::statfs(path.c_str(), &info) != 0) return false;
  switch (static_cast<unsigned long>(info.f_type)) {
    case 0x6969UL:       // NFS
    case 0x517BUL:       // SMB
    case 0xFF534D42UL:   // CIFS
    case 0xFE534D42UL:   // SMB2
    case 0x5346414FUL:   // AFS
    case 0x73757245UL:   // Coda
    case 0x0BD00BD0UL:   // Lustre
    case 0x47504653UL:   // GPFS
    case 0x00C36400UL:   // CephFS
    case 0x01021997UL:   // 9p
      return true;
    default:
      return false;
  }
}

// "file:" URI of a path with immutable=1; characters with a meaning in URIs are percent-encoded.
std::string immutable_uri(const std::string& path) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string uri = "file:";
  for (unsigned char c : fs::absolute(path).string()) {
    if (c == '%' || c == '?' || c == '#' || c < 0x20 || c >= 0x7f) {
      uri += '%';
      uri += kHex[c >> 4];
      uri += kHex[c & 15];
    } else {
      uri += static_cast<char>(c);
    }
  }
  return uri + "?immutable=1";
}

}  // namespace

bool CacheError::is_busy() const {
  int primary = sqlite_code_ & 0xff;
  return primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
}

CacheError::Kind CacheError::kind() const {
  if (kind_ != Kind::other) return kind_;
  switch (sqlite_code_ & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return Kind::damaged;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Kind::busy;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_CANTOPEN:
      return Kind::unwritable;
    default:
      return Kind::other;
  }
}

Database::Database(const std::string& path, const Options& options) : path_(path), read_only_(options.read_only) {
  check_path_before_open(path, options);
  if (sqlite3_threadsafe() == 0) {
    throw_error(path, "open", "this SQLite library was built without thread support (SQLITE_THREADSAFE=0)", 0);
  }
  int flags = options.read_only ? SQLITE_OPEN_READONLY
                                : (SQLITE_OPEN_READWRITE | (options.create ? SQLITE_OPEN_CREATE : 0));
  flags |= SQLITE_OPEN_NOMUTEX;   // callers serialize access themselves (see the header)
  try {
    open_and_probe(path, flags, options.busy_timeout_ms);
  } catch (const CacheError& error) {
    // A reader of a WAL database must be able to create the -shm/-wal files next to it; in a directory
    // it cannot write (another user's cache, a shipped read-only cache) SQLite refuses with READONLY or
    // CANTOPEN. With no -wal file present every committed page is in the main file, so it can be read
    // as an immutable snapshot instead (no locks: a writer appearing later is not seen).
    const int primary = error.sqlite_code() & 0xff;
    std::error_code ec;
    if (!options.read_only || (primary != SQLITE_READONLY && primary != SQLITE_CANTOPEN) ||
        fs::exists(path + "-wal", ec)) {
      throw;
    }
    open_and_probe(immutable_uri(path), flags | SQLITE_OPEN_URI, options.busy_timeout_ms);
    immutable_ = true;
  }
}

void Database::open_and_probe(const std::string& filename, int flags, int busy_timeout_ms) {
  int rc = sqlite3_open_v2(filename.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string detail = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    throw_error(path_, "open", detail, rc);
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, std::max(0, busy_timeout_ms));
  try {
    // SQLite reads the file lazily; touch the header now so a foreign file fails here, at open,
    // with a clear message rather than at some later query.
    Statement probe(*this, "SELECT count(*) FROM sqlite_master");
    probe.step();
    exec("PRAGMA synchronous=NORMAL", "set synchronous=NORMAL");
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

Database::~Database() {
  if (db_) sqlite3_close_v2(db_);
}

void Database::fail(std::string_view operation, int rc) const {
  // sqlite3_errmsg describes the most recent failure on the connection; fall back to the generic
  // text when that failure is not the one being reported.
  std::string detail = (db_ && sqlite3_extended_errcode(db_) == rc) ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  throw_error(path_, operation, detail, rc);
}

void Database::exec(std::string_view sql, std::string_view what) {
  std::string text(sql);
  char* error = nullptr;
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &error);
  if (rc != SQLITE_OK) {
    std::string detail = error ? error : sqlite3_errstr(rc);
    sqlite3_free(error);
    throw_error(path_, what, detail, rc);
  }
}

std::string Database::journal_mode() {
  Statement query(*this, "PRAGMA journal_mode");
  return query.step() ? query.column_text(0) : std::string();
}

std::string Database::enable_wal() {
  if (read_only_) return journal_mode();   // switching modes writes the file header
  if (on_network_filesystem(path_)) return journal_mode();
  // The pragma answers with the mode now in force: "wal" only if this file system and VFS allow it.
  Statement pragma(*this, "PRAGMA journal_mode=WAL");
  std::string mode = pragma.step() ? pragma.column_text(0) : std::string();
  std::transform(mode.begin(), mode.end(), mode.begin(), [](unsigned char c) { return std::tolower(c); });
  return mode;
}

void Database::set_busy_timeout(int ms) { sqlite3_busy_timeout(db_, std::max(0, ms)); }

long long Database::changes() const { return sqlite3_changes(db_); }

bool Database::in_transaction() const { return sqlite3_get_autocommit(db_) == 0; }

Statement::Statement(Database& db, std::string_view sql) : db_(db), sql_(sql) {
  const char* tail = nullptr;
  int rc = sqlite3_prepare_v2(db.handle(), sql_.c_str(), static_cast<int>(sql_.size()), &stmt_, &tail);
  if (rc != SQLITE_OK) db_.fail("prepare " + describe_sql(sql_), rc);
  if (!stmt_) throw_error(db.path(), "prepare " + describe_sql(sql_), "the SQL text holds no statement", 0);
  if (tail && std::any_of(tail, sql_.c_str() + sql_.size(), [](unsigned char c) { return !std::isspace(c); })) {
    sqlite3_finalize(stmt_);
    stmt_ = nullptr;
    throw_error(db.path(), "prepare " + describe_sql(sql_), "one Statement holds exactly one SQL statement", 0);
  }
}

Statement::~Statement() {
  if (stmt_) sqlite3_finalize(stmt_);
}

void Statement::check_bind(int rc, int index) {
  if (rc != SQLITE_OK) db_.fail("bind parameter " + std::to_string(index) + " of " + describe_sql(sql_), rc);
}

Statement& Statement::bind(int index, long long value) {
  check_bind(sqlite3_bind_int64(stmt_, index, value), index);
  return *this;
}

Statement& Statement::bind(int index, double value) {
  check_bind(sqlite3_bind_double(stmt_, index, value), index);
  return *this;
}

Statement& Statement::bind(int index, std::string_view text) {
  check_bind(sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8), index);
  return *this;
}

Statement& Statement::bind_blob(int index, const void* data, std::size_t size) {
  // A null pointer would bind SQL NULL; an empty blob must stay a (zero-length) blob.
  static const unsigned char kEmpty = 0;
  check_bind(sqlite3_bind_blob64(stmt_, index, size ? data : &kEmpty, size, SQLITE_TRANSIENT), index);
  return *this;
}

Statement& Statement::bind_null(int index) {
  check_bind(sqlite3_bind_null(stmt_, index), index);
  return *this;
}

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  sqlite3_reset(stmt_);   // leaves the statement reusable after e.g. SQLITE_BUSY
  db_.fail("run " + describe_sql(sql_), rc);
}

void Statement::run() {
  if (step()) {
    throw_error(db_.path(), "run " + describe_sql(sql_), "the statement returned rows where none were expected", 0);
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

bool Statement::column_is_null(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }

long long Statement::column_int64(int column) const { return sqlite3_column_int64(stmt_, column); }

double Statement::column_double(int column) const { return sqlite3_column_double(stmt_, column); }

std::string Statement::column_text(int column) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
  int size = sqlite3_column_bytes(stmt_, column);   // after column_text, as the API requires
  return text ? std::string(text, static_cast<std::size_t>(size)) : std::string();
}

std::vector<unsigned char> Statement::column_blob(int column) const {
  const auto* data = static_cast<const unsigned char*>(sqlite3_column_blob(stmt_, column));
  int size = sqlite3_column_bytes(stmt_, column);
  return data ? std::vector<unsigned char>(data, data + size) : std::vector<unsigned char>();
}

int Statement::column_count() const { return sqlite3_column_count(stmt_); }

Transaction::Transaction(Database& db, Mode mode) : db_(db) {
  switch (mode) {
    case Mode::deferred: db_.exec("BEGIN DEFERRED", "begin a deferred transaction"); break;
    case Mode::immediate: db_.exec("BEGIN IMMEDIATE", "begin an immediate (write) transaction"); break;
    case Mode::exclusive: db_.exec("BEGIN EXCLUSIVE", "begin an exclusive transaction"); break;
  }
}

Transaction::~Transaction() {
  if (!done_ && db_.in_transaction()) {
    // Never throws from a destructor; a failed rollback leaves SQLite to undo the journal on next open.
    sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
  }
}

void Transaction::commit() {
  if (done_) throw CacheError("qattn cache: " + db_.path() + ": commit failed: the transaction was already committed");
  db_.exec("COMMIT", "commit");   // on failure (e.g. SQLITE_BUSY) the transaction stays open and is rolled back
  done_ = true;
}

}  // namespace qattn::cache

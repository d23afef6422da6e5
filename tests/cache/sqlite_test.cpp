// The RAII SQLite layer: column types round-trip exactly, values are bound (never parsed as SQL),
// transactions roll back unless committed, IMMEDIATE excludes a second writer, errors are one line
// naming the file, the operation and the cause.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/sqlite.hpp"
#include "cache_test_support.hpp"

namespace qattn::cache {
namespace {

using testing::TempDir;

long long count_rows(Database& db, const std::string& table) {
  Statement query(db, "SELECT count(*) FROM " + table);
  query.step();
  return query.column_int64(0);
}

TEST(Sqlite, EveryColumnTypeRoundTripsExactly) {
  TempDir dir;
  Database db(dir.file("types.db"), {});
  db.exec("CREATE TABLE t (i INTEGER, d REAL, s TEXT, b BLOB, n TEXT)", "create");
  const long long big = -9007199254740993LL;   // not representable as a double
  const double pi = 3.141592653589793;
  const std::string text = "caf\xc3\xa9 \xe2\x88\x9a";
  const std::vector<unsigned char> blob = {0x00, 0xff, 0x10, 0x00, 0x7f, 0x80, 0x01};
  Statement insert(db, "INSERT INTO t (i, d, s, b, n) VALUES (?, ?, ?, ?, ?)");
  insert.bind(1, big).bind(2, pi).bind(3, text).bind_blob(4, blob.data(), blob.size()).bind_null(5);
  insert.run();

  Statement query(db, "SELECT i, d, s, b, n FROM t");
  ASSERT_TRUE(query.step());
  EXPECT_EQ(query.column_count(), 5);
  EXPECT_EQ(query.column_int64(0), big);
  EXPECT_EQ(query.column_double(1), pi);
  EXPECT_EQ(query.column_text(2), text);
  EXPECT_EQ(query.column_blob(3), blob);
  EXPECT_TRUE(query.column_is_null(4));
  EXPECT_FALSE(query.column_is_null(0));
  EXPECT_FALSE(query.step());
}

TEST(Sqlite, BoundTextIsNeverParsedAsSql) {
  TempDir dir;
  Database db(dir.file("bind.db"), {});
  db.exec("CREATE TABLE t (s TEXT)", "create");
  const std::string hostile = "x'); DROP TABLE t; --";
  Statement(db, "INSERT INTO t (s) VALUES (?)").bind(1, hostile).run();
  Statement query(db, "SELECT s FROM t");
  ASSERT_TRUE(query.step());
  EXPECT_EQ(query.column_text(0), hostile);
  EXPECT_EQ(count_rows(db, "t"), 1);
}

TEST(Sqlite, StatementIsReusableAfterReset) {
  TempDir dir;
  Database db(dir.file("reuse.db"), {});
  db.exec("CREATE TABLE t (v INTEGER)", "create");
  Statement insert(db, "INSERT INTO t (v) VALUES (?)");
  for (int v = 1; v <= 5; ++v) {
    insert.reset();
    insert.bind(1, v * 11).run();
  }
  Statement sum(db, "SELECT sum(v) FROM t");
  ASSERT_TRUE(sum.step());
  EXPECT_EQ(sum.column_int64(0), 165);
}

TEST(Sqlite, TransactionRollsBackUnlessCommitted) {
  TempDir dir;
  Database db(dir.file("tx.db"), {});
  db.exec("CREATE TABLE t (v INTEGER)", "create");
  {
    Transaction transaction(db);
    Statement(db, "INSERT INTO t (v) VALUES (?)").bind(1, 7).run();
    EXPECT_TRUE(db.in_transaction());
  }
  EXPECT_FALSE(db.in_transaction());
  EXPECT_EQ(count_rows(db, "t"), 0);
  {
    Transaction transaction(db);
    Statement(db, "INSERT INTO t (v) VALUES (?)").bind(1, 7).run();
    transaction.commit();
    EXPECT_THROW(transaction.commit(), CacheError);
  }
  EXPECT_EQ(count_rows(db, "t"), 1);
}

TEST(Sqlite, ImmediateTransactionExcludesASecondWriter) {
  TempDir dir;
  const std::string path = dir.file("lock.db");
  Database first(path, {});
  first.exec("CREATE TABLE t (v INTEGER)", "create");
  ASSERT_EQ(first.enable_wal(), "wal");
  Database::Options short_wait;
  short_wait.busy_timeout_ms = 50;
  Database second(path, short_wait);
  Transaction held(first);
  try {
    Transaction blocked(second);
    FAIL() << "a second IMMEDIATE transaction started while the first held the write lock";
  } catch (const CacheError& error) {
    const std::string message = error.what();
    EXPECT_TRUE(error.is_busy()) << message;
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("begin"), std::string::npos) << message;
    EXPECT_NE(message.find("busy timeout"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(Sqlite, ErrorsNameFileOperationAndSqliteMessage) {
  TempDir dir;
  const std::string path = dir.file("errors.db");
  Database db(path, {});
  try {
    Statement query(db, "SELECT * FROM\n no_such_table");
    FAIL() << "preparing a query on a missing table succeeded";
  } catch (const CacheError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("prepare `SELECT * FROM no_such_table`"), std::string::npos) << message;
    EXPECT_NE(message.find("no such table"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_THROW(Statement(db, "SELECT 1; SELECT 2"), CacheError);
}

TEST(Sqlite, WalIsUsedOnALocalFileSystem) {
  TempDir dir;
  Database db(dir.file("wal.db"), {});
  EXPECT_EQ(db.enable_wal(), "wal");
  EXPECT_EQ(db.journal_mode(), "wal");
}

TEST(Sqlite, ReadOnlyConnectionRefusesWrites) {
  TempDir dir;
  const std::string path = dir.file("ro.db");
  {
    Database db(path, {});
    db.exec("CREATE TABLE t (v INTEGER)", "create");
  }
  Database::Options read_only;
  read_only.read_only = true;
  Database db(path, read_only);
  EXPECT_EQ(count_rows(db, "t"), 0);
  try {
    Statement(db, "INSERT INTO t (v) VALUES (?)").bind(1, 3).run();
    FAIL() << "a read-only connection wrote a row";
  } catch (const CacheError& error) {
    EXPECT_NE(std::string(error.what()).find("read-only"), std::string::npos) << error.what();
  }
}

TEST(Sqlite, RejectsDirectoriesMissingFilesAndForeignFiles) {
  TempDir dir;
  try {
    Database db(dir.path(), {});
    FAIL() << "opened a directory as a database";
  } catch (const CacheError& error) {
    EXPECT_NE(std::string(error.what()).find("is a directory"), std::string::npos) << error.what();
  }

  Database::Options read_only;
  read_only.read_only = true;
  try {
    Database db(dir.file("missing.db"), read_only);
    FAIL() << "opened a missing file read-only";
  } catch (const CacheError& error) {
    EXPECT_NE(std::string(error.what()).find("does not exist"), std::string::npos) << error.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("missing.db")));

  const std::string text_file = dir.file("notes.txt");
  const std::string text = "these are notes, not a database; they are longer than a SQLite header would be.\n"
                           "second line of the notes file, to be sure it is past the 100-byte header\n";
  testing::write_bytes(text_file, text);
  try {
    Database db(text_file, {});
    FAIL() << "opened a text file as a database";
  } catch (const CacheError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("not a SQLite database"), std::string::npos) << message;
    EXPECT_NE(message.find(text_file), std::string::npos) << message;
  }
  EXPECT_EQ(testing::read_bytes(text_file), text);
}

}  // namespace
}  // namespace qattn::cache

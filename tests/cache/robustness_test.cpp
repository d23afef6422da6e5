// The open policy (cache/open_layer.hpp) for every way a cache file can be unusable: each case is
// reported in one line, damaged files are set aside (renamed, byte-identical) and replaced by a fresh
// cache, and files qattn must not touch (newer schema, locked, read-only, shipped) are left as they are.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "cache/open_layer.hpp"
#include "cache/schema.hpp"
#include "cache_test_support.hpp"

namespace qattn::cache {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// A real cache with enough binaries to span many pages, closed (so the WAL is checkpointed away).
void write_cache(const std::string& path, int binaries = 20) {
  Store store(path);
  for (int i = 0; i < binaries; ++i) store.put_binary(testing::sample_binary(static_cast<unsigned>(i), 9000));
  store.put_tuned(testing::sample_tuned("spec", 12.0));
}

// Files in `dir` whose name starts with `prefix`, other than `prefix` itself.
std::vector<std::string> set_aside_files(const TempDir& dir, const std::string& name) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    const std::string file = entry.path().filename().string();
    if (file.rfind(name + ".corrupt-", 0) == 0) found.push_back(entry.path().string());
  }
  return found;
}

void expect_one_line(const std::string& note) {
  EXPECT_FALSE(note.empty());
  EXPECT_EQ(note.find('\n'), std::string::npos) << note;
  EXPECT_EQ(note.rfind("qattn cache: ", 0), 0u) << note;
}

// The damaged-file cases end the same way: one note, the old bytes under <name>.corrupt-<UTC>, and a
// fresh, working cache at the original path.
void expect_set_aside_and_fresh(const TempDir& dir, const std::string& path, const std::string& bytes,
                                const std::string& expected_cause) {
  OpenedLayer opened = open_user_layer(path, StoreOptions{false, 1000});
  expect_one_line(opened.note);
  EXPECT_NE(opened.note.find(expected_cause), std::string::npos) << opened.note;
  EXPECT_NE(opened.note.find("started a fresh cache"), std::string::npos) << opened.note;
  EXPECT_EQ(opened.note.find("left untouched"), std::string::npos) << "contradicts what was done: " << opened.note;
  ASSERT_NE(opened.store, nullptr);
  EXPECT_EQ(opened.store->stats().binary_count, 0);
  opened.store->put_binary(testing::sample_binary(99));
  const std::vector<std::string> aside = set_aside_files(dir, "user.db");
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_NE(opened.note.find(aside[0]), std::string::npos) << opened.note;
  EXPECT_EQ(testing::read_bytes(aside[0]), bytes) << "the set-aside file must be byte-identical";
  EXPECT_NE(aside[0].find(".corrupt-20"), std::string::npos) << aside[0];
  EXPECT_EQ(aside[0].back(), 'Z') << aside[0];
}

TEST(Robustness, CorruptedFileIsSetAsideAndReplaced) {
  TempDir dir;
  const std::string path = dir.file("user.db");
  write_cache(path);
  std::string bytes = testing::read_bytes(path);
  for (std::size_t i = 0; i < 16; ++i) bytes[i] = static_cast<char>(0xA5);   // the SQLite header magic
  testing::write_bytes(path, bytes);
  expect_set_aside_and_fresh(dir, path, bytes, "not a database");
}

TEST(Robustness, DamagedBtreeIsSetAsideAndReplaced) {
  TempDir dir;
  const std::string path = dir.file("user.db");
  write_cache(path);
  std::string bytes = testing::read_bytes(path);
  // Page 1 holds sqlite_master; smash its b-tree page header (after the 100-byte file header).
  for (std::size_t i = 100; i < 112; ++i) bytes[i] = static_cast<char>(0xFF);
  testing::write_bytes(path, bytes);
  expect_set_aside_and_fresh(dir, path, bytes, "malformed");
}

TEST(Robustness, TruncatedFileIsSetAsideAndReplaced) {
  TempDir dir;
  const std::string path = dir.file("user.db");
  write_cache(path);
  std::string bytes = testing::read_bytes(path);
  ASSERT_GT(bytes.size(), 40000u);
  bytes.resize(bytes.size() / 2);
  testing::write_bytes(path, bytes);
  expect_set_aside_and_fresh(dir, path, bytes, "truncated");
}

// Another program's database is not qattn's to rename: it is left as it is and not used.
TEST(Robustness, ForeignDatabaseIsLeftAloneAndNotUsed) {
  TempDir dir;
  const std::string path = dir.file("user.db");
  {
    Database db(path, {});
    db.exec("CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('ada');", "create a foreign db");
  }
  const std::string bytes = testing::read_bytes(path);
  OpenedLayer opened = open_user_layer(path, StoreOptions{false, 1000});
  expect_one_line(opened.note);
  EXPECT_TRUE(opened.refused);
  EXPECT_EQ(opened.store, nullptr);
  EXPECT_NE(opened.note.find("not a qattn cache"), std::string::npos) << opened.note;
  EXPECT_TRUE(set_aside_files(dir, "user.db").empty());
  EXPECT_EQ(testing::read_bytes(path), bytes);
}

// A stale -wal left next to a fresh file would be replayed into it: set_aside moves the companions too,
// under the same name, and a second set-aside in the same second gets its own name.
TEST(Robustness, SetAsideMovesCompanionFilesAndNeverOverwrites) {
  TempDir dir;
  const std::string path = dir.file("user.db");
  testing::write_bytes(path, "main bytes");
  testing::write_bytes(path + "-wal", "wal bytes");
  testing::write_bytes(path + "-shm", "shm bytes");
  const std::string first = set_aside(path);
  EXPECT_EQ(testing::read_bytes(first), "main bytes");
  EXPECT_EQ(testing::read_bytes(first + "-wal"), "wal bytes");
  EXPECT_EQ(testing::read_bytes(first + "-shm"), "shm bytes");
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + "-wal"));
  testing::write_bytes(path, "second");
  const std::string second = set_aside(path);
  EXPECT_NE(second, first);
  EXPECT_EQ(testing::read_bytes(first), "main bytes");
  EXPECT_EQ(testing::read_bytes(second), "second");
  EXPECT_THROW(set_aside(path), CacheError) << "nothing left to rename";
}

TEST(Robustness, FutureSchemaIsLeftAloneAndNotUsed) {
  TempDir dir;
  const std::string path = dir.file("user.db");
  write_cache(path, 1);
  {
    Database db(path, {});
    db.exec("UPDATE meta SET value = 9 WHERE key = 'schema_version'; "
            "UPDATE meta SET value = 8 WHERE key = 'compatible_version'; PRAGMA journal_mode=DELETE;",
            "pretend a newer qattn wrote it");
  }
  const std::string before = testing::read_bytes(path);
  OpenedLayer opened = open_user_layer(path, StoreOptions{false, 1000});
  expect_one_line(opened.note);
  EXPECT_EQ(opened.store, nullptr);
  EXPECT_NE(opened.note.find("newer qattn"), std::string::npos) << opened.note;
  EXPECT_NE(opened.note.find("going on without the user cache"), std::string::npos) << opened.note;
  EXPECT_EQ(testing::read_bytes(path), before);
  EXPECT_TRUE(set_aside_files(dir, "user.db").empty());
}

TEST(Robustness, ShippedLayerIsNeverRenamed) {
  TempDir dir;
  const std::string path = dir.file("shipped.db");
  testing::write_bytes(path, std::string(8192, '\x5a'));
  const std::string before = testing::read_bytes(path);
  OpenedLayer opened = open_shipped_layer(path, 1000);
  expect_one_line(opened.note);
  EXPECT_EQ(opened.store, nullptr);
  EXPECT_NE(opened.note.find("going on without the shipped cache"), std::string::npos) << opened.note;
  EXPECT_EQ(testing::read_bytes(path), before);
  EXPECT_TRUE(set_aside_files(dir, "shipped.db").empty());

  auto layers = open_layers(dir.file("user.db"), path);
  EXPECT_TRUE(layers->writable()) << "the user layer still works";
  ASSERT_EQ(layers->warnings().size(), 1u);
  EXPECT_EQ(layers->warnings()[0], opened.note);
}

TEST(Robustness, LockedByAnotherProcessIsNotUsedNorRenamed) {
  TempDir dir;
  const std::string path = dir.file("user.db");
  write_cache(path, 1);
  int locked[2], release[2];
  ASSERT_EQ(::pipe(locked), 0);
  ASSERT_EQ(::pipe(release), 0);
  pid_t holder = testing::start_child([&] {
    ::close(locked[0]);
    ::close(release[1]);
    Database db(path, {});
    // Exclusive locking mode keeps the lock after the write: no other connection can even read.
    db.exec("PRAGMA locking_mode=EXCLUSIVE", "take the file for this connection");
    db.exec("BEGIN EXCLUSIVE; UPDATE meta SET value = value WHERE key = 'schema_version'; COMMIT;", "lock it");
    ::close(locked[1]);   // tell the parent the lock is held
    char byte;
    return ::read(release[0], &byte, 1) == 0 ? 0 : 5;   // hold until the parent closes the pipe
  });
  ::close(locked[1]);
  ::close(release[0]);
  char byte;
  ASSERT_EQ(::read(locked[0], &byte, 1), 0);
  const std::string before = testing::read_bytes(path);
  OpenedLayer opened = open_user_layer(path, StoreOptions{false, 100});
  ::close(release[1]);
  EXPECT_EQ(testing::wait_child(holder), 0);
  expect_one_line(opened.note);
  EXPECT_EQ(opened.store, nullptr);
  EXPECT_NE(opened.note.find("locked by another process"), std::string::npos) << opened.note;
  EXPECT_TRUE(set_aside_files(dir, "user.db").empty());
  EXPECT_EQ(testing::read_bytes(path), before);
  EXPECT_NE(open_user_layer(path).store, nullptr) << "usable again once the lock is gone";
}

// Runs `body` in a child that cannot write `dir` (as root, by dropping to nobody; otherwise by modes).
int without_write_permission(const std::string& dir, const std::function<int()>& body) {
  ::chmod(dir.c_str(), 0555);
  pid_t child = testing::start_child([&] {
    if (::geteuid() == 0 && ::setuid(65534) != 0) return 7;
    return body();
  });
  const int status = testing::wait_child(child);
  ::chmod(dir.c_str(), 0755);
  return status;
}

TEST(Robustness, ReadOnlyFileIsUsedReadOnly) {
  TempDir dir;
  ::chmod(dir.path().c_str(), 0755);
  const std::string path = dir.file("user.db");
  write_cache(path, 3);
  ::chmod(path.c_str(), 0444);
  const std::string before = testing::read_bytes(path);
  const int status = without_write_permission(dir.path(), [&] {
    OpenedLayer opened = open_user_layer(path, StoreOptions{false, 1000});
    if (!opened.store) return 2;
    if (!opened.store->read_only()) return 3;
    if (opened.note.find("using it read-only") == std::string::npos || opened.note.find('\n') != std::string::npos)
      return 4;
    if (!opened.store->get_binary(testing::sample_binary(1, 9000).key)) return 5;
    LayeredStore layers(std::move(opened.store), nullptr, {opened.note});
    if (layers.writable() || layers.put_tuned(testing::sample_tuned("new", 1.0))) return 6;
    return 0;
  });
  EXPECT_EQ(status, 0) << "2: not opened, 3: opened writable, 4: bad note, 5: cannot read, 6: wrote";
  EXPECT_EQ(testing::read_bytes(path), before);
  EXPECT_TRUE(set_aside_files(dir, "user.db").empty());
}

TEST(Robustness, ReadOnlyDirectoryWithoutAFileMeansNoUserLayer) {
  TempDir dir;
  ::chmod(dir.path().c_str(), 0755);
  const std::string path = dir.file("user.db");
  const int status = without_write_permission(dir.path(), [&] {
    OpenedLayer opened = open_user_layer(path, StoreOptions{false, 1000});
    if (opened.store) return 2;
    if (opened.note.find("going on without the user cache") == std::string::npos) return 3;
    return opened.note.find('\n') == std::string::npos ? 0 : 4;
  });
  EXPECT_EQ(status, 0) << "2: a layer was opened, 3/4: bad note";
  EXPECT_FALSE(fs::exists(path));
}

TEST(Robustness, ReadOnlyOpenOfADamagedFileRenamesNothing) {
  TempDir dir;
  const std::string path = dir.file("user.db");
  testing::write_bytes(path, std::string(4096, 'q'));
  OpenedLayer opened = open_user_layer(path, StoreOptions{true, 1000});
  expect_one_line(opened.note);
  EXPECT_EQ(opened.store, nullptr);
  EXPECT_TRUE(set_aside_files(dir, "user.db").empty());
  EXPECT_EQ(testing::read_bytes(path), std::string(4096, 'q'));
}

}  // namespace
}  // namespace qattn::cache

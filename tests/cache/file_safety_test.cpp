// Issue 29, "no data lost" and "bounded waits", at the cache layer: nothing qattn writes may destroy a
// file that is not its own, inputs must be regular files of bounded size, a foreign --db is refused (not
// renamed), and a lock held by another connection costs one bounded wait, after which the layer is
// dropped and the trouble is observable (LayeredStore::status).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "cache/layered_store.hpp"
#include "cache/maintenance.hpp"
#include "cache/open_layer.hpp"
#include "cache/safe_file.hpp"
#include "cache_test_support.hpp"

namespace qattn::cache {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string make_cache(const TempDir& dir, const std::string& name) {
  const std::string path = dir.file(name);
  Store store(path);
  store.put_binary(testing::sample_binary(1));
  TunedRecord tuned = testing::sample_tuned("spec", 10.0);
  tuned.binary_key = testing::sample_binary(1).key;
  store.put_tuned(tuned);
  return path;
}

std::size_t entries_in(const TempDir& dir) {
  return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()));
}

// --- outputs ---------------------------------------------------------------------------------------

TEST(FileSafety, ExportOntoItsOwnDatabaseIsRefused) {
  TempDir dir;
  const std::string db = make_cache(dir, "same.db");
  { Store checkpoint(db); }
  EXPECT_THROW(export_json(db, db), BadPath);
  EXPECT_TRUE(verify_file(db).empty()) << "the database must be intact";
  EXPECT_EQ(Store(db, StoreOptions{true}).stats().binary_count, 1);
}

TEST(FileSafety, ExportRefusesToReplaceAFileThatIsNotAnExport) {
  TempDir dir;
  const std::string db = make_cache(dir, "c.db");
  const std::string notes = dir.file("notes.json");
  testing::write_bytes(notes, "{\"my\": \"notes\"}\n");
  try {
    export_json(db, notes);
    FAIL() << "replaced a file that is not an export";
  } catch (const BadPath& error) {
    EXPECT_NE(std::string(error.what()).find("not a qattn-cache-export"), std::string::npos) << error.what();
  }
  EXPECT_EQ(testing::read_bytes(notes), "{\"my\": \"notes\"}\n");
  const std::string out = dir.file("out.json");
  export_json(db, out);
  export_json(db, out);   // an earlier export may be replaced
  EXPECT_NE(testing::read_bytes(out).find("qattn-cache-export"), std::string::npos);
}

TEST(FileSafety, MergeRefusesAnInputOrAForeignFileAsOutput) {
  TempDir dir;
  const std::string a = make_cache(dir, "a.db");
  const std::string b = make_cache(dir, "b.db");
  { Store checkpoint_a(a), checkpoint_b(b); }
  const std::string a_bytes = testing::read_bytes(a);
  EXPECT_THROW(merge_files(a, b, a), BadPath);
  EXPECT_THROW(merge_files(a, b, b), BadPath);
  EXPECT_EQ(testing::read_bytes(a), a_bytes);
  const std::string notes = dir.file("notes.txt");
  testing::write_bytes(notes, "keep me");
  EXPECT_THROW(merge_files(a, b, notes), BadPath);
  EXPECT_EQ(testing::read_bytes(notes), "keep me");
  const std::string out = dir.file("out.db");
  merge_files(a, b, out);
  merge_files(a, b, out);   // an earlier merge result may be replaced
  EXPECT_TRUE(verify_file(out).empty());
}

TEST(FileSafety, ImportIntoItsOwnJsonIsRefused) {
  TempDir dir;
  const std::string db = make_cache(dir, "c.db");
  const std::string json = dir.file("e.json");
  export_json(db, json);
  const std::string bytes = testing::read_bytes(json);
  EXPECT_THROW(import_json(json, json), BadPath);
  EXPECT_EQ(testing::read_bytes(json), bytes);
}

// The old writer used "<path>.tmp" and followed a link planted there; the new one never opens a
// guessable name, so a planted link (or any file) beside the target is left alone.
TEST(FileSafety, WriteNeverFollowsAPlantedTemporaryLink) {
  TempDir dir;
  const std::string victim = dir.file("victim");
  testing::write_bytes(victim, "precious");
  const std::string target = dir.file("k.cu");
  for (const char* suffix : {".tmp", ".tmp-1", ".tmp-" }) fs::create_symlink(victim, target + suffix);
  fs::create_symlink(victim, target + ".tmp-" + std::to_string(::getpid()));
  write_file_safely(target, "kernel source\n");
  EXPECT_EQ(testing::read_bytes(victim), "precious");
  EXPECT_EQ(testing::read_bytes(target), "kernel source\n");
  EXPECT_FALSE(fs::is_symlink(target));
}

TEST(FileSafety, WriteRefusesASymbolicLinkDirectoryOrPlantedName) {
  TempDir dir;
  const std::string victim = dir.file("victim");
  testing::write_bytes(victim, "precious");
  const std::string link = dir.file("link.cu");
  fs::create_symlink(victim, link);
  EXPECT_THROW(write_file_safely(link, "x"), BadPath);
  EXPECT_EQ(testing::read_bytes(victim), "precious");
  EXPECT_TRUE(fs::is_symlink(link));
  fs::create_directory(dir.file("d"));
  EXPECT_THROW(write_file_safely(dir.file("d"), "x"), BadPath);
  const std::size_t before = entries_in(dir);
  EXPECT_THROW(write_file_safely(link, "x"), BadPath);
  EXPECT_EQ(entries_in(dir), before) << "a refused write leaves no temporary file behind";
}

TEST(FileSafety, CharacterDevicesAreWrittenThroughNeverReplaced) {
  struct stat before {};
  ASSERT_EQ(::stat("/dev/null", &before), 0);
  ASSERT_TRUE(S_ISCHR(before.st_mode));
  write_file_safely("/dev/null", "discarded\n");
  struct stat after {};
  ASSERT_EQ(::lstat("/dev/null", &after), 0);
  EXPECT_TRUE(S_ISCHR(after.st_mode)) << "the device node was replaced";
  EXPECT_EQ(after.st_rdev, before.st_rdev);
  EXPECT_EQ(after.st_ino, before.st_ino);
}

TEST(FileSafety, ReplacedFileKeepsItsModeAndNewFilesFollowTheUmask) {
  TempDir dir;
  const std::string path = dir.file("out.txt");
  testing::write_bytes(path, "old");
  ::chmod(path.c_str(), 0640);
  write_file_safely(path, "new");
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0640u);
  const std::string fresh = dir.file("fresh.txt");
  write_file_safely(fresh, "x");
  ASSERT_EQ(::stat(fresh.c_str(), &info), 0);
  EXPECT_NE(info.st_mode & 0044, 0u) << "a new output must not be private (mkstemp's 0600)";
}

// --- inputs ----------------------------------------------------------------------------------------

TEST(FileSafety, InputsMustBeRegularFilesOfBoundedSize) {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(read_input_file(fifo, "--grid"), BadPath);   // would block forever if opened
  EXPECT_THROW(read_input_file("/dev/zero", "--grid"), BadPath);   // would never end
  EXPECT_THROW(read_input_file(dir.path(), "--grid"), BadPath);
  const std::string big = dir.file("big.json");
  testing::write_bytes(big, std::string(2000, ' '));
  EXPECT_THROW(read_input_file(big, "--grid", 1000), BadPath);
  EXPECT_EQ(read_input_file(big, "--grid", 2000).size(), 2000u);
  EXPECT_THROW(import_json("/dev/zero", dir.file("c.db")), std::invalid_argument);
  EXPECT_THROW(import_json(fifo, dir.file("c.db")), std::invalid_argument);
}

TEST(FileSafety, ADatabaseThatIsNotARegularFileIsRefusedWithoutOpeningIt) {
  TempDir dir;
  const std::string fifo = dir.file("fifo.db");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, std::string("/dev/full"), std::string("/dev/zero")}) {
    try {
      Store store(path);
      FAIL() << "opened " << path << " as a cache";
    } catch (const CacheError& error) {
      EXPECT_EQ(error.kind(), CacheError::Kind::not_a_cache) << error.what();
    }
    OpenedLayer user = open_user_layer(path);
    EXPECT_TRUE(user.refused) << path;
    EXPECT_EQ(user.store, nullptr);
    EXPECT_EQ(user.note.find('\n'), std::string::npos);
    OpenedLayer shipped = open_shipped_layer(path);
    EXPECT_EQ(shipped.store, nullptr);
    EXPECT_FALSE(shipped.note.empty());
  }
  struct stat info {};
  ASSERT_EQ(::lstat(fifo.c_str(), &info), 0);
  EXPECT_TRUE(S_ISFIFO(info.st_mode));
}

// --- a file that is not a qattn cache --------------------------------------------------------------

TEST(FileSafety, AUserFileNamedAsTheCacheIsNeverRenamed) {
  TempDir dir;
  const std::string notes = dir.file("notes.json");
  testing::write_bytes(notes, "{\"important\": true}\n");
  OpenedLayer opened = open_user_layer(notes);
  EXPECT_TRUE(opened.refused);
  EXPECT_EQ(opened.store, nullptr);
  EXPECT_NE(opened.note.find("not a qattn cache"), std::string::npos) << opened.note;
  EXPECT_EQ(testing::read_bytes(notes), "{\"important\": true}\n");
  EXPECT_EQ(entries_in(dir), 1u) << "nothing was renamed or created beside it";
  try {
    open_layers(notes, "", {}, /*refuse_foreign_user_file=*/true);
    FAIL() << "an explicitly named foreign file must be refused";
  } catch (const CacheError& error) {
    EXPECT_EQ(error.kind(), CacheError::Kind::not_a_cache);
    EXPECT_EQ(std::string(error.what()).find("going on"), std::string::npos) << error.what();
  }
  EXPECT_EQ(testing::read_bytes(notes), "{\"important\": true}\n");
}

TEST(FileSafety, OnlyQattnCachesAreRecognisedAsSuch) {
  TempDir dir;
  const std::string cache = make_cache(dir, "c.db");
  { Store checkpoint(cache); }
  EXPECT_TRUE(looks_like_qattn_cache(cache));
  std::string smashed = testing::read_bytes(cache);
  for (int i = 0; i < 16; ++i) smashed[static_cast<std::size_t>(i)] = 'x';   // the magic is what broke
  testing::write_bytes(dir.file("smashed.db"), smashed);
  EXPECT_TRUE(looks_like_qattn_cache(dir.file("smashed.db")));
  testing::write_bytes(dir.file("source.cpp"), "CREATE TABLE meta (...); CREATE TABLE kernel_binary (...);" +
                                                   std::string(200, ' '));
  EXPECT_FALSE(looks_like_qattn_cache(dir.file("source.cpp"))) << "text that mentions the schema is not a cache";
  {
    Database other(dir.file("other.db"), {});
    other.exec("CREATE TABLE users (name TEXT)", "create a foreign db");
  }
  EXPECT_FALSE(looks_like_qattn_cache(dir.file("other.db")));
  EXPECT_FALSE(looks_like_qattn_cache(dir.file("missing.db")));
}

// --- bounded waits ---------------------------------------------------------------------------------

// Another connection inside BEGIN EXCLUSIVE: the first write waits about the budget, then the layer is
// dropped and said so once; later writes cost nothing (they used to wait the whole timeout each time).
TEST(FileSafety, ALockHeldByAnotherConnectionCostsOneBoundedWait) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  constexpr int kBudgetMs = 400;
  auto user = std::make_unique<Store>(path, StoreOptions{false, kBudgetMs});
  LayeredStore layers(std::move(user), nullptr);
  EXPECT_EQ(layers.status(), "");
  Database other(path, {});
  Transaction held(other, Transaction::Mode::exclusive);

  const auto start = std::chrono::steady_clock::now();
  layers.put_binary(testing::sample_binary(5));
  const auto first_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(first_ms, 5 * kBudgetMs) << "one operation must wait about its budget, retries included";
  const std::string status = layers.status();
  EXPECT_NE(status.find("not used again"), std::string::npos) << status;
  EXPECT_NE(status.find("lock"), std::string::npos) << status;
  EXPECT_EQ(status.find('\n'), std::string::npos);

  const auto second = std::chrono::steady_clock::now();
  for (unsigned i = 0; i < 5; ++i) layers.put_binary(testing::sample_binary(10 + i));
  layers.put_tuned(testing::sample_tuned("spec", 3.0));
  const auto later_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - second).count();
  EXPECT_LT(later_ms, kBudgetMs) << "a dropped layer must not be waited on again";
  EXPECT_NE(layers.sources().find("dropped"), std::string::npos) << layers.sources();
}

TEST(FileSafety, AnUnusableUserLayerIsReportedInStatus) {
  TempDir dir;
  auto layers = open_layers(dir.file("ok.db"), dir.file("missing-shipped.db"));
  EXPECT_NE(layers->status().find("missing-shipped.db"), std::string::npos) << layers->status();
  auto clean = open_layers(dir.file("ok2.db"), "");
  EXPECT_EQ(clean->status(), "");
}

}  // namespace
}  // namespace qattn::cache

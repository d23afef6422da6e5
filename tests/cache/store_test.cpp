// Store behaviour in one process: binaries and tuned winners round-trip, corrupt blobs are misses that
// get dropped, the faster tuned result wins, any key mismatch misses, read-only opens refuse writes,
// and bad paths fail with a clear message without touching the file.
#include <gtest/gtest.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <string>

#include "cache/digest.hpp"
#include "cache/store.hpp"
#include "cache_test_support.hpp"

namespace qattn::cache {
namespace {

using testing::sample_binary;
using testing::sample_tuned;
using testing::TempDir;

void expect_same_binary(const BinaryRecord& got, const BinaryRecord& expected) {
  EXPECT_EQ(got.key, expected.key);
  EXPECT_EQ(got.kernel_name, expected.kernel_name);
  EXPECT_EQ(got.arch, expected.arch);
  EXPECT_EQ(got.options, expected.options);
  EXPECT_EQ(got.toolchain, expected.toolchain);
  EXPECT_EQ(got.image, expected.image);
  EXPECT_EQ(got.registers, expected.registers);
  EXPECT_EQ(got.spill_bytes, expected.spill_bytes);
  EXPECT_EQ(got.smem_bytes, expected.smem_bytes);
  EXPECT_EQ(got.compile_ms, expected.compile_ms);
}

long long raw_binary_rows(const std::string& path, const std::string& key) {
  Database db(path, {});
  Statement query(db, "SELECT count(*) FROM kernel_binary WHERE key = ?");
  query.bind(1, key);
  query.step();
  return query.column_int64(0);
}

TEST(Store, BinaryRoundTrip) {
  TempDir dir;
  Store store(dir.file("cache.db"));
  const BinaryRecord a = sample_binary(1), b = sample_binary(2, 200000);
  EXPECT_FALSE(store.get_binary(a.key).has_value());
  store.put_binary(a);
  store.put_binary(b);
  std::optional<BinaryRecord> got_a = store.get_binary(a.key);
  std::optional<BinaryRecord> got_b = store.get_binary(b.key);
  ASSERT_TRUE(got_a.has_value());
  ASSERT_TRUE(got_b.has_value());
  expect_same_binary(*got_a, a);
  expect_same_binary(*got_b, b);

  Store::Stats stats = store.stats();
  EXPECT_EQ(stats.binary_count, 2);
  EXPECT_EQ(stats.binary_bytes, 203000);
  EXPECT_EQ(stats.binary_hits, 2);
  EXPECT_EQ(stats.binary_misses, 1);
  EXPECT_EQ(stats.corrupt_binaries, 0);
  EXPECT_EQ(stats.journal_mode, "wal");
  EXPECT_GT(stats.file_bytes, 200000);
  EXPECT_EQ(stats.path, dir.file("cache.db"));
  EXPECT_TRUE(store.warnings().empty());
}

TEST(Store, PutBinaryIsIdempotent) {
  TempDir dir;
  Store store(dir.file("cache.db"));
  BinaryRecord first = sample_binary(3);
  store.put_binary(first);
  BinaryRecord second = first;
  second.image = testing::pseudo_image(99, 500);
  second.registers = 1;
  store.put_binary(second);   // same key: a no-op
  std::optional<BinaryRecord> got = store.get_binary(first.key);
  ASSERT_TRUE(got.has_value());
  expect_same_binary(*got, first);
  EXPECT_EQ(store.stats().binary_count, 1);
  EXPECT_THROW(store.put_binary(BinaryRecord{}), std::invalid_argument);
}

TEST(Store, CorruptBlobIsAMissAndTheRowIsRemoved) {
  TempDir dir;
  const std::string path = dir.file("cache.db");
  Store store(path);
  const BinaryRecord record = sample_binary(4);
  const BinaryRecord neighbour = sample_binary(5);
  store.put_binary(record);
  store.put_binary(neighbour);
  {
    // Flip one bit of the stored image behind the Store's back.
    Database db(path, {});
    std::vector<unsigned char> image = record.image;
    image[1234] ^= 0x04;
    Statement(db, "UPDATE kernel_binary SET image = ? WHERE key = ?")
        .bind_blob(1, image.data(), image.size())
        .bind(2, record.key)
        .run();
  }
  EXPECT_FALSE(store.get_binary(record.key).has_value());
  EXPECT_EQ(raw_binary_rows(path, record.key), 0);
  ASSERT_EQ(store.warnings().size(), 1u);
  EXPECT_NE(store.warnings()[0].find(record.key), std::string::npos) << store.warnings()[0];
  EXPECT_NE(store.warnings()[0].find("dropped"), std::string::npos) << store.warnings()[0];
  EXPECT_EQ(store.stats().corrupt_binaries, 1);
  EXPECT_TRUE(store.get_binary(neighbour.key).has_value());   // only the bad row went

  store.put_binary(record);   // the recompiled binary goes back in
  std::optional<BinaryRecord> again = store.get_binary(record.key);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->image, record.image);
}

TEST(Store, TruncatedBlobIsDetected) {
  TempDir dir;
  const std::string path = dir.file("cache.db");
  Store store(path);
  const BinaryRecord record = sample_binary(6);
  store.put_binary(record);
  {
    Database db(path, {});
    Statement(db, "UPDATE kernel_binary SET image = substr(image, 1, 100) WHERE key = ?").bind(1, record.key).run();
  }
  EXPECT_FALSE(store.get_binary(record.key).has_value());
  EXPECT_EQ(raw_binary_rows(path, record.key), 0);
}

// Bit rot in the file itself (not through SQL): flip one byte of the image inside the database page.
TEST(Store, ByteFlippedInTheFileIsDetected) {
  TempDir dir;
  const std::string path = dir.file("cache.db");
  const BinaryRecord record = sample_binary(7, 1500);
  { Store(path).put_binary(record); }   // closing the last connection folds the WAL into the file
  ASSERT_FALSE(std::filesystem::exists(path + "-wal"));
  std::string bytes = testing::read_bytes(path);
  const std::string needle(record.image.begin() + 700, record.image.begin() + 764);
  const std::size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos) << "the image is not stored contiguously in the file";
  ASSERT_EQ(bytes.find(needle, at + 1), std::string::npos);
  bytes[at + 10] = static_cast<char>(bytes[at + 10] ^ 0x80);
  testing::write_bytes(path, bytes);

  Store store(path);
  EXPECT_FALSE(store.get_binary(record.key).has_value());
  EXPECT_EQ(store.stats().corrupt_binaries, 1);
  EXPECT_EQ(raw_binary_rows(path, record.key), 0);
}

TEST(Store, ReadOnlyStoreReportsButKeepsACorruptRow) {
  TempDir dir;
  const std::string path = dir.file("cache.db");
  const BinaryRecord record = sample_binary(8);
  { Store(path).put_binary(record); }
  {
    Database db(path, {});
    Statement(db, "UPDATE kernel_binary SET image_sha256 = ? WHERE key = ?")
        .bind(1, sha256_hex("something else"))
        .bind(2, record.key)
        .run();
  }
  Store store(path, Store::Options{true, 1000});
  EXPECT_FALSE(store.get_binary(record.key).has_value());
  ASSERT_EQ(store.warnings().size(), 1u);
  EXPECT_NE(store.warnings()[0].find("read-only"), std::string::npos) << store.warnings()[0];
  EXPECT_EQ(raw_binary_rows(path, record.key), 1);
}

TEST(Store, TunedKeepsTheFaster) {
  TempDir dir;
  Store store(dir.file("cache.db"));
  const std::string spec = "qattn_sm90_fwd_qi8_ki8_vf8_of16_d128";
  TunedRecord first = sample_tuned(spec, 10.0);
  EXPECT_TRUE(store.put_tuned(first));

  TunedRecord slower = sample_tuned(spec, 12.5);
  slower.kernel_name = "slower";
  EXPECT_FALSE(store.put_tuned(slower));
  std::optional<TunedRecord> got = store.get_tuned(spec, first.bucket, first.device, first.toolchain);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->kernel_name, first.kernel_name);
  EXPECT_EQ(got->time_us, 10.0);

  TunedRecord faster = sample_tuned(spec, 8.25);
  faster.kernel_name = "faster";
  faster.candidates_json = R"([{"k":"faster","time_us":8.25},{"k":"slow","time_us":30}])";
  EXPECT_TRUE(store.put_tuned(faster));
  TunedRecord tie = faster;
  tie.kernel_name = "tie";
  EXPECT_FALSE(store.put_tuned(tie));

  got = store.get_tuned(spec, first.bucket, first.device, first.toolchain);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->kernel_name, "faster");
  EXPECT_EQ(got->time_us, 8.25);
  EXPECT_EQ(got->candidates_json, faster.candidates_json);
  EXPECT_EQ(got->binary_key, faster.binary_key);
  EXPECT_EQ(got->device, faster.device);
  EXPECT_EQ(got->created_at, faster.created_at);
  EXPECT_EQ(store.stats().tuned_count, 1);

  TunedRecord nan = sample_tuned(spec, std::nan(""));
  EXPECT_THROW(store.put_tuned(nan), std::invalid_argument);
  EXPECT_THROW(store.put_tuned(sample_tuned(spec, -1.0)), std::invalid_argument);
}

TEST(Store, AnyKeyMismatchIsAMiss) {
  TempDir dir;
  Store store(dir.file("cache.db"));
  const TunedRecord record = sample_tuned("spec_a", 5.5);
  ASSERT_TRUE(store.put_tuned(record));
  ASSERT_TRUE(store.get_tuned(record.spec, record.bucket, record.device, record.toolchain).has_value());

  auto miss = [&](const std::string& spec, const std::string& bucket, const DeviceKey& device,
                  const std::string& toolchain) {
    return !store.get_tuned(spec, bucket, device, toolchain).has_value();
  };
  EXPECT_TRUE(miss(record.spec, record.bucket, record.device, "nvrtc=13.1;qattn=0.1.0;templates=0123abcd"));
  EXPECT_TRUE(miss(record.spec, record.bucket, record.device, "nvrtc=13.0;qattn=0.1.0;templates=feedbeef"));
  EXPECT_TRUE(miss("spec_b", record.bucket, record.device, record.toolchain));
  EXPECT_TRUE(miss(record.spec, "b1_q8192_kv8192", record.device, record.toolchain));
  DeviceKey device = record.device;
  device.driver_version = 12080;
  EXPECT_TRUE(miss(record.spec, record.bucket, device, record.toolchain));
  device = record.device;
  device.sm_count = 66;   // e.g. a MIG slice
  EXPECT_TRUE(miss(record.spec, record.bucket, device, record.toolchain));
  device = record.device;
  device.cc_minor = 1;
  EXPECT_TRUE(miss(record.spec, record.bucket, device, record.toolchain));
  device = record.device;
  device.name = "NVIDIA H100 PCIe";
  EXPECT_TRUE(miss(record.spec, record.bucket, device, record.toolchain));

  Store::Stats stats = store.stats();
  EXPECT_EQ(stats.tuned_hits, 1);
  EXPECT_EQ(stats.tuned_misses, 8);
}

TEST(Store, ListAndClear) {
  TempDir dir;
  Store store(dir.file("cache.db"));
  ASSERT_TRUE(store.put_tuned(sample_tuned("spec_b", 3.0)));
  ASSERT_TRUE(store.put_tuned(sample_tuned("spec_a", 4.0)));
  store.put_binary(sample_binary(10));
  std::vector<TunedRecord> listed = store.list_tuned();
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].spec, "spec_a");
  EXPECT_EQ(listed[0].time_us, 4.0);
  EXPECT_EQ(listed[1].spec, "spec_b");
  store.clear();
  EXPECT_TRUE(store.list_tuned().empty());
  Store::Stats stats = store.stats();
  EXPECT_EQ(stats.binary_count, 0);
  EXPECT_EQ(stats.tuned_count, 0);
  EXPECT_EQ(stats.schema_version, kSchemaVersion);
}

TEST(Store, ReadOnlyOpenRefusesWritesWithAClearError) {
  TempDir dir;
  const std::string path = dir.file("cache.db");
  const BinaryRecord binary = sample_binary(11);
  const TunedRecord tuned = sample_tuned("spec_ro", 2.0);
  {
    Store store(path);
    store.put_binary(binary);
    store.put_tuned(tuned);
  }
  Store store(path, Store::Options{true, 1000});
  EXPECT_TRUE(store.stats().read_only);
  ASSERT_TRUE(store.get_binary(binary.key).has_value());
  ASSERT_TRUE(store.get_tuned(tuned.spec, tuned.bucket, tuned.device, tuned.toolchain).has_value());
  auto expect_refused = [&](const std::function<void()>& write, const std::string& operation) {
    try {
      write();
      ADD_FAILURE() << operation << " succeeded on a read-only store";
    } catch (const CacheError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(operation + " refused"), std::string::npos) << message;
      EXPECT_NE(message.find("read-only"), std::string::npos) << message;
      EXPECT_NE(message.find(path), std::string::npos) << message;
    }
  };
  expect_refused([&] { store.put_binary(sample_binary(12)); }, "put_binary");
  expect_refused([&] { store.put_tuned(sample_tuned("spec_ro", 1.0)); }, "put_tuned");
  expect_refused([&] { store.clear(); }, "clear");
  EXPECT_EQ(store.stats().binary_count, 1);
}

TEST(Store, BadPathsFailClearlyAndLeaveFilesAlone) {
  TempDir dir;
  auto expect_open_error = [](const std::string& path, const std::string& fragment, Store::Options options = {}) {
    try {
      Store store(path, options);
      ADD_FAILURE() << "opened " << path;
    } catch (const CacheError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(fragment), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  };
  expect_open_error(dir.path(), "is a directory");
  expect_open_error(dir.file("absent.db"), "does not exist", Store::Options{true, 1000});

  const std::string garbage_path = dir.file("garbage.db");
  std::string garbage(8192, '\0');
  for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 7 + 3);
  testing::write_bytes(garbage_path, garbage);
  expect_open_error(garbage_path, "not a SQLite database");
  EXPECT_EQ(testing::read_bytes(garbage_path), garbage);

  testing::write_bytes(dir.file("file"), "x");
  expect_open_error(dir.file("file/cache.db"), "cannot create the cache directory");
}

// Runs `body` as an unprivileged user: directly when not root, otherwise in a child process that drops
// to nobody (root ignores file permissions). Returns body's failure text, "" on success.
std::string run_unprivileged(const std::function<std::string()>& body) {
  if (::geteuid() != 0) return body();
  int channel[2];
  if (::pipe(channel) != 0) return "pipe() failed";
  pid_t child = testing::start_child([&] {
    ::close(channel[0]);
    std::string failure;
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) {
      failure = "could not drop root privileges to nobody";
    } else {
      failure = body();
    }
    if (!failure.empty() && ::write(channel[1], failure.data(), failure.size()) < 0) return 2;
    return failure.empty() ? 0 : 1;
  });
  ::close(channel[1]);
  std::string failure;
  char buffer[512];
  for (ssize_t n; (n = ::read(channel[0], buffer, sizeof buffer)) > 0;) failure.append(buffer, n);
  ::close(channel[0]);
  const int status = testing::wait_child(child);
  if (status != 0 && failure.empty()) failure = "unprivileged child exited with status " + std::to_string(status);
  return failure;
}

std::string expect_open_failure(const std::string& path, Store::Options options, const std::string& fragment) {
  try {
    Store store(path, options);
    return "opened " + path + " where it should fail with '" + fragment + "'";
  } catch (const CacheError& error) {
    const std::string message = error.what();
    return message.find(fragment) != std::string::npos ? "" : "unexpected error: " + message;
  }
}

TEST(Store, PermissionProblemsFailClearlyAndReadOnlyStillReads) {
  TempDir dir;
  const std::string locked = dir.file("locked.db"), shared = dir.file("shared.db");
  const BinaryRecord record = sample_binary(13);
  { Store(locked).put_binary(record); }
  { Store(shared).put_binary(record); }   // left in WAL mode, with no -wal/-shm files after closing
  ASSERT_EQ(::chmod(locked.c_str(), 0), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 0444), 0);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0555), 0);   // nobody may create -shm/-wal files here

  const std::string failure = run_unprivileged([&]() -> std::string {
    std::string problem = expect_open_failure(locked, {}, "not readable");
    if (problem.empty()) problem = expect_open_failure(shared, {}, "not writable");
    if (!problem.empty()) return problem;
    try {
      Store store(shared, Store::Options{true, 1000});
      std::optional<BinaryRecord> got = store.get_binary(record.key);
      if (!got || got->image != record.image) return "the read-only store did not return the stored binary";
      if (store.stats().journal_mode.find("immutable") == std::string::npos) {
        return "expected an immutable snapshot, journal mode is " + store.stats().journal_mode;
      }
    } catch (const std::exception& error) {
      return std::string("read-only open failed: ") + error.what();
    }
    return "";
  });
  ::chmod(dir.path().c_str(), 0755);
  EXPECT_EQ(failure, "");
}

TEST(BinaryKey, CoversEveryInputUnambiguously) {
  const std::vector<std::string> options = {"-std=c++17", "-arch=sm_90"};
  const std::string key = binary_key("src", options, "sm_90", "tc");
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(key, binary_key("src", options, "sm_90", "tc"));
  // The documented layout: source \0 options joined by '\n' \0 arch \0 toolchain.
  EXPECT_EQ(key, sha256_hex(std::string("src\0-std=c++17\n-arch=sm_90\0sm_90\0tc", 35)));

  EXPECT_NE(key, binary_key("src ", options, "sm_90", "tc"));
  EXPECT_NE(key, binary_key("src", {"-std=c++17"}, "sm_90", "tc"));
  EXPECT_NE(key, binary_key("src", {"-arch=sm_90", "-std=c++17"}, "sm_90", "tc"));
  EXPECT_NE(key, binary_key("src", options, "sm_90a", "tc"));
  EXPECT_NE(key, binary_key("src", options, "sm_90", "tc2"));
  EXPECT_NE(binary_key("src", {"-a", "-b"}, "sm_90", "tc"), binary_key("src", {"-a -b"}, "sm_90", "tc"));

  EXPECT_THROW(binary_key("src", {"-a\n-b"}, "sm_90", "tc"), std::invalid_argument);
  EXPECT_THROW(binary_key("src", {""}, "sm_90", "tc"), std::invalid_argument);
  EXPECT_THROW(binary_key(std::string("s\0rc", 4), options, "sm_90", "tc"), std::invalid_argument);
}

TEST(DeviceKey, CanonicalText) {
  EXPECT_EQ(testing::h100().str(), "cc=9.0;sms=132;driver=13000;name=NVIDIA H100 80GB HBM3");
  DeviceKey other = testing::h100();
  EXPECT_EQ(other, testing::h100());
  other.sm_count = 114;
  EXPECT_NE(other, testing::h100());
  EXPECT_NE(other.str(), testing::h100().str());
}

}  // namespace
}  // namespace qattn::cache

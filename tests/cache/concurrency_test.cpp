// Sharing one cache file: threads of one process, a writer and a reader in different processes, and
// eight processes writing at once. Nothing may be lost and nobody may fail with "database is locked".
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache/store.hpp"
#include "cache_test_support.hpp"

namespace qattn::cache {
namespace {

using testing::sample_binary;
using testing::sample_tuned;
using testing::TempDir;

constexpr int kWorkers = 8;
constexpr int kPutsPerWorker = 50;

// Worker w's i-th item; the shared spec gets a different time from every put.
unsigned seed_of(int worker, int i) { return static_cast<unsigned>(1000 * (worker + 1) + i); }
double shared_time(int worker, int i) { return 100.0 + ((worker * 37 + i * 11) % 173) + 0.5 * worker; }
std::string spec_of(int worker, int i) { return "spec_w" + std::to_string(worker) + "_i" + std::to_string(i); }

DecisionRecord decision_of(const std::string& key, const std::string& json) {
  DecisionRecord record;
  record.kind = "decode_splits";
  record.key = key;
  record.device = testing::h100();
  record.toolchain = testing::kToolchain;
  record.json = json;
  return record;
}

std::string splits_json(int worker, int i) {
  return "{\"splits\":" + std::to_string(1 + (worker + i) % 16) + ",\"by\":" + std::to_string(worker) + "}";
}

void put_items(Store& store, int worker) {
  for (int i = 0; i < kPutsPerWorker; ++i) {
    store.put_binary(sample_binary(seed_of(worker, i), 2000 + 13 * i));
    store.put_decision(decision_of(spec_of(worker, i), splits_json(worker, i)));
    store.put_decision(decision_of("spec_shared", splits_json(worker, i)));   // replaced by every writer
    store.put_tuned(sample_tuned(spec_of(worker, i), 1.0 + i));
    TunedRecord shared = sample_tuned("spec_shared", shared_time(worker, i));
    shared.kernel_name = "shared_from_w" + std::to_string(worker) + "_i" + std::to_string(i);
    store.put_tuned(shared);
  }
}

double fastest_shared_time() {
  double best = 1e30;
  for (int w = 0; w < kWorkers; ++w)
    for (int i = 0; i < kPutsPerWorker; ++i) best = std::min(best, shared_time(w, i));
  return best;
}

// Everything every worker wrote is there, intact, and the shared spec holds the fastest time.
void expect_all_items(Store& store) {
  for (int w = 0; w < kWorkers; ++w) {
    for (int i = 0; i < kPutsPerWorker; ++i) {
      const BinaryRecord expected = sample_binary(seed_of(w, i), 2000 + 13 * i);
      std::optional<BinaryRecord> got = store.get_binary(expected.key);
      ASSERT_TRUE(got.has_value()) << "worker " << w << " item " << i;
      ASSERT_EQ(got->image, expected.image) << "worker " << w << " item " << i;
      std::optional<TunedRecord> tuned =
          store.get_tuned(spec_of(w, i), "b1_q4096_kv4096", testing::h100(), testing::kToolchain);
      ASSERT_TRUE(tuned.has_value()) << "worker " << w << " item " << i;
      ASSERT_EQ(tuned->time_us, 1.0 + i);
      std::optional<DecisionRecord> decision =
          store.get_decision("decode_splits", spec_of(w, i), testing::h100(), testing::kToolchain);
      ASSERT_TRUE(decision.has_value()) << "worker " << w << " item " << i;
      ASSERT_EQ(decision->json, splits_json(w, i));
    }
  }
  EXPECT_TRUE(store.get_decision("decode_splits", "spec_shared", testing::h100(), testing::kToolchain).has_value());
  std::optional<TunedRecord> shared =
      store.get_tuned("spec_shared", "b1_q4096_kv4096", testing::h100(), testing::kToolchain);
  ASSERT_TRUE(shared.has_value());
  EXPECT_EQ(shared->time_us, fastest_shared_time());
  Store::Stats stats = store.stats();
  EXPECT_EQ(stats.binary_count, kWorkers * kPutsPerWorker);
  EXPECT_EQ(stats.tuned_count, kWorkers * kPutsPerWorker + 1);
  EXPECT_EQ(stats.decision_count, kWorkers * kPutsPerWorker + 1);
  EXPECT_EQ(stats.corrupt_binaries, 0);
}

TEST(Concurrency, ThreadsShareOneStore) {
  TempDir dir;
  Store store(dir.file("cache.db"));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      try {
        put_items(store, w);
      } catch (const std::exception& error) {
        ++failures;
        ADD_FAILURE() << "thread " << w << ": " << error.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  expect_all_items(store);
}

TEST(Concurrency, ChildWritesParentReads) {
  TempDir dir;
  const std::string path = dir.file("cache.db");
  const BinaryRecord binary = sample_binary(42, 50000);
  const TunedRecord tuned = sample_tuned("spec_cross", 7.75);
  pid_t child = testing::start_child([&] {
    Store store(path);
    store.put_binary(binary);
    return store.put_tuned(tuned) ? 0 : 1;
  });
  ASSERT_EQ(testing::wait_child(child), 0);

  Store store(path);
  std::optional<BinaryRecord> got = store.get_binary(binary.key);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->image, binary.image);
  std::optional<TunedRecord> got_tuned = store.get_tuned(tuned.spec, tuned.bucket, tuned.device, tuned.toolchain);
  ASSERT_TRUE(got_tuned.has_value());
  EXPECT_EQ(got_tuned->kernel_name, tuned.kernel_name);
  EXPECT_EQ(got_tuned->time_us, 7.75);
}

TEST(Concurrency, ParentWritesChildReads) {
  TempDir dir;
  const std::string path = dir.file("cache.db");
  const BinaryRecord binary = sample_binary(43, 4096);
  { Store(path).put_binary(binary); }
  pid_t child = testing::start_child([&] {
    Store store(path, Store::Options{true, 1000});
    std::optional<BinaryRecord> got = store.get_binary(binary.key);
    if (!got) return 2;
    return got->image == binary.image ? 0 : 3;
  });
  EXPECT_EQ(testing::wait_child(child), 0) << "2: the child missed the binary, 3: it read different bytes";
}

// 8 processes x 50 rounds of put_binary, two put_tuned and two put_decision each, released at the same
// instant: nothing is lost and no writer fails with "database is locked".
TEST(Concurrency, EightWriterProcessesLoseNothing) {
  TempDir dir;
  const std::string path = dir.file("cache.db");
  { Store create(path); }   // the schema exists before the race starts
  int start_gate[2];
  ASSERT_EQ(::pipe(start_gate), 0);
  std::vector<pid_t> children;
  for (int w = 0; w < kWorkers; ++w) {
    children.push_back(testing::start_child([&, w] {
      ::close(start_gate[1]);
      char byte;
      if (::read(start_gate[0], &byte, 1) != 0) return 4;   // returns 0 (EOF) when the parent opens the gate
      Store store(path);
      put_items(store, w);
      return 0;
    }));
  }
  ::close(start_gate[0]);
  ::close(start_gate[1]);   // all children start now
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_EQ(testing::wait_child(children[w]), 0) << "writer process " << w << " failed (see its stderr)";
  }
  Store store(path);
  expect_all_items(store);
}

// Two processes create the same new database at once: exactly one creates the schema, both succeed.
TEST(Concurrency, SimultaneousFirstOpens) {
  TempDir dir;
  const std::string path = dir.file("fresh/cache.db");
  int start_gate[2];
  ASSERT_EQ(::pipe(start_gate), 0);
  std::vector<pid_t> children;
  for (int w = 0; w < kWorkers; ++w) {
    children.push_back(testing::start_child([&, w] {
      ::close(start_gate[1]);
      char byte;
      if (::read(start_gate[0], &byte, 1) != 0) return 4;
      Store store(path);
      return store.put_tuned(sample_tuned("first_open_" + std::to_string(w), 1.0)) ? 0 : 5;
    }));
  }
  ::close(start_gate[0]);
  ::close(start_gate[1]);
  for (int w = 0; w < kWorkers; ++w) EXPECT_EQ(testing::wait_child(children[w]), 0) << "process " << w;
  Store store(path);
  EXPECT_EQ(store.stats().tuned_count, kWorkers);
  EXPECT_EQ(store.stats().schema_version, kSchemaVersion);
}

// A writer that holds the lock for less than the budget is waited out; one that holds it longer costs
// one bounded wait (the budget is for the whole operation, retries included) and a clear busy error.
TEST(Concurrency, BusyIsWaitedOutWithinTheBudgetThenReported) {
  TempDir dir;
  const std::string path = dir.file("cache.db");
  constexpr int kBudgetMs = 1000;
  Store store(path, Store::Options{false, kBudgetMs});
  Database other(path, {});
  {
    std::optional<Transaction> held(std::in_place, other);
    std::string writer_error;
    std::thread writer([&] {
      try {
        store.put_binary(sample_binary(77));
      } catch (const std::exception& error) {
        writer_error = error.what();
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    held->commit();
    writer.join();
    EXPECT_EQ(writer_error, "");
  }
  EXPECT_TRUE(store.get_binary(sample_binary(77).key).has_value());

  Transaction held_forever(other);
  const auto start = std::chrono::steady_clock::now();
  try {
    store.put_binary(sample_binary(78));
    FAIL() << "a write succeeded while another connection held the write lock";
  } catch (const CacheError& error) {
    EXPECT_TRUE(error.is_busy()) << error.what();
    EXPECT_EQ(error.kind(), CacheError::Kind::busy) << error.what();
    EXPECT_NE(std::string(error.what()).find("waited"), std::string::npos) << error.what();
  }
  const auto waited_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited_ms, kBudgetMs / 2) << "gave up long before the budget";
  EXPECT_LT(waited_ms, 5 * kBudgetMs) << "the wait of one operation must stay near its budget";
}

}  // namespace
}  // namespace qattn::cache

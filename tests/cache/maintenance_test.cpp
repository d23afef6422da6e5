// export -> import round trip (identical rows), import validation (all or nothing), merge conflict
// rules (faster tuned winner, newer decision, atomic output, read-only inputs), verify (a flipped byte
// in a stored cubin, an orphaned tuned row), prune counts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cache/base64.hpp"
#include "cache/maintenance.hpp"
#include "cache_test_support.hpp"

namespace qattn::cache {
namespace {

using testing::TempDir;
using json = nlohmann::json;

DecisionRecord decision(const std::string& key, const std::string& json_text, long long created_at,
                        int driver = 13000) {
  DecisionRecord record;
  record.kind = "decode_dataflow";
  record.key = key;
  record.device = testing::h100();
  record.device.driver_version = driver;
  record.toolchain = testing::kToolchain;
  record.json = json_text;
  record.created_at = created_at;
  return record;
}

// Every row of a file, as text, for comparing two files row by row (created_at included).
std::string dump_rows(const std::string& path) {
  Database db(path, Database::Options{true, false, 1000});
  std::string out;
  for (const char* sql : {"SELECT key, kernel_name, arch, options, toolchain, hex(image), image_size, image_sha256, "
                          "registers, spill_bytes, smem_bytes, compile_ms, created_at FROM kernel_binary ORDER BY key",
                          "SELECT * FROM tuned_kernel ORDER BY spec, bucket, device, toolchain",
                          "SELECT * FROM decision ORDER BY kind, key, device, toolchain"}) {
    Statement query(db, sql);
    while (query.step()) {
      for (int c = 0; c < query.column_count(); ++c) out += query.column_text(c) + "|";
      out += "\n";
    }
    out += "--\n";
  }
  return out;
}

void fill(const std::string& path) {
  Store store(path);
  store.put_binary(testing::sample_binary(1));
  store.put_binary(testing::sample_binary(2, 5001));   // a size that needs base64 padding
  TunedRecord tuned = testing::sample_tuned("spec_a", 11.5);
  tuned.binary_key = testing::sample_binary(1).key;
  store.put_tuned(tuned);
  store.put_decision(decision("spec_a", R"({"flow":"kv_major","us":[1.5,2.5]})", 1760000500));
}

TEST(Base64, RoundTripsEveryPaddingAndRejectsJunk) {
  for (std::size_t size : {0u, 1u, 2u, 3u, 4u, 5u, 257u}) {
    std::vector<unsigned char> bytes = testing::pseudo_image(static_cast<unsigned>(size), size);
    std::optional<std::vector<unsigned char>> back = base64_decode(base64_encode(bytes));
    ASSERT_TRUE(back.has_value()) << size;
    EXPECT_EQ(*back, bytes) << size;
  }
  EXPECT_EQ(base64_encode({'M', 'a'}), "TWE=");
  EXPECT_FALSE(base64_decode("TWE").has_value());
  EXPECT_FALSE(base64_decode("TW!=").has_value());
  EXPECT_FALSE(base64_decode("TWF=").has_value()) << "non-canonical: the dropped bits are not zero";
}

TEST(Maintenance, ExportThenImportGivesIdenticalRows) {
  TempDir dir;
  const std::string source = dir.file("source.db"), target = dir.file("target.db"), out = dir.file("out.json");
  fill(source);
  EXPECT_TRUE(export_json(source, out).empty());
  const json exported = json::parse(testing::read_bytes(out));
  EXPECT_EQ(exported["format"], "qattn-cache-export");
  EXPECT_EQ(exported["schema_version"], 2);
  EXPECT_EQ(exported["binaries"].size(), 2u);
  EXPECT_EQ(exported["tuned"][0]["device"]["driver_version"], 13000);

  const MergeReport report = import_json(out, target);
  EXPECT_EQ(report.binaries_added, 2);
  EXPECT_EQ(report.tuned_added, 1);
  EXPECT_EQ(report.decisions_added, 1);
  EXPECT_EQ(dump_rows(target), dump_rows(source));
  EXPECT_TRUE(verify_file(target).empty());

  const MergeReport again = import_json(out, target);   // idempotent
  EXPECT_EQ(again.unchanged, 4);
  EXPECT_TRUE(again.conflicts.empty());
  EXPECT_EQ(dump_rows(target), dump_rows(source));
}

TEST(Maintenance, ImportIsAllOrNothing) {
  TempDir dir;
  const std::string source = dir.file("source.db"), target = dir.file("target.db"), out = dir.file("out.json");
  fill(source);
  export_json(source, out);
  json doc = json::parse(testing::read_bytes(out));
  std::string image = doc["binaries"][1]["image_base64"];
  image[10] = image[10] == 'A' ? 'B' : 'A';   // still base64, no longer the digested image
  doc["binaries"][1]["image_base64"] = image;
  testing::write_bytes(out, doc.dump());
  { Store existing(target); existing.put_tuned(testing::sample_tuned("spec_keep", 3.0)); }
  const std::string before = dump_rows(target);
  try {
    import_json(out, target);
    FAIL() << "imported an image that does not match its sha256";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("binaries[1]"), std::string::npos) << message;
    EXPECT_NE(message.find("image_sha256"), std::string::npos) << message;
  }
  EXPECT_EQ(dump_rows(target), before) << "nothing of the file may have been written";

  export_json(source, out);
  doc = json::parse(testing::read_bytes(out));
  doc["tuned"][0].erase("time_us");
  testing::write_bytes(out, doc.dump());
  EXPECT_THROW(import_json(out, target), std::invalid_argument);
  testing::write_bytes(out, R"({"format":"something else"})");
  EXPECT_THROW(import_json(out, target), std::invalid_argument);
  EXPECT_EQ(dump_rows(target), before);
}

TEST(Maintenance, MergeKeepsTheFasterWinnerAndTheNewerDecision) {
  TempDir dir;
  const std::string a = dir.file("a.db"), b = dir.file("b.db"), out = dir.file("c.db");
  {
    Store store(a);
    store.put_binary(testing::sample_binary(1));
    TunedRecord slow = testing::sample_tuned("spec_x", 20.0);
    slow.kernel_name = "winner_from_a";
    store.put_tuned(slow);
    store.put_tuned(testing::sample_tuned("only_a", 1.0));
    store.put_decision(decision("spec_x", R"({"flow":"a"})", 1760000900));   // newer
    store.put_decision(decision("spec_y", R"({"flow":"a"})", 1760000100));
  }
  {
    Store store(b);
    store.put_binary(testing::sample_binary(1));
    store.put_binary(testing::sample_binary(2));
    TunedRecord fast = testing::sample_tuned("spec_x", 15.0);
    fast.kernel_name = "winner_from_b";
    store.put_tuned(fast);
    store.put_decision(decision("spec_x", R"({"flow":"b"})", 1760000500));
    store.put_decision(decision("spec_y", R"({"flow":"b"})", 1760000200));   // newer
  }
  const std::string a_before = testing::read_bytes(a), b_before = testing::read_bytes(b);
  const MergeReport report = merge_files(a, b, out);
  EXPECT_EQ(testing::read_bytes(a), a_before) << "inputs are opened read-only";
  EXPECT_EQ(testing::read_bytes(b), b_before);
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(out).parent_path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << "left behind: " << entry.path();
  }
  ASSERT_EQ(report.conflicts.size(), 3u);   // spec_x tuned, spec_x and spec_y decisions
  EXPECT_NE(report.conflicts[0].find("kept winner_from_b, the faster"), std::string::npos) << report.conflicts[0];

  Store merged(out, StoreOptions{true, 1000});
  EXPECT_EQ(merged.get_tuned("spec_x", "b1_q4096_kv4096", testing::h100(), testing::kToolchain)->kernel_name,
            "winner_from_b");
  EXPECT_TRUE(merged.get_tuned("only_a", "b1_q4096_kv4096", testing::h100(), testing::kToolchain).has_value());
  EXPECT_EQ(merged.get_decision("decode_dataflow", "spec_x", testing::h100(), testing::kToolchain)->json,
            R"({"flow":"a"})");
  EXPECT_EQ(merged.get_decision("decode_dataflow", "spec_y", testing::h100(), testing::kToolchain)->json,
            R"({"flow":"b"})");
  EXPECT_EQ(merged.stats().binary_count, 2);
}

TEST(Maintenance, VerifyCatchesAFlippedByteInAStoredCubin) {
  TempDir dir;
  const std::string path = dir.file("v.db");
  fill(path);
  EXPECT_TRUE(verify_file(path).empty());
  // Find the second binary's image in the file and flip one byte of it, as a failing disk would.
  const std::vector<unsigned char> image = testing::sample_binary(2, 5001).image;
  std::string bytes = testing::read_bytes(path);
  const std::size_t at = bytes.find(std::string(image.begin() + 100, image.begin() + 132));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 5] = static_cast<char>(bytes[at + 5] ^ 0x01);
  testing::write_bytes(path, bytes);
  const std::vector<std::string> problems = verify_file(path);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find(testing::sample_binary(2).kernel_name), std::string::npos) << problems[0];
  EXPECT_NE(problems[0].find("sha256"), std::string::npos) << problems[0];
}

TEST(Maintenance, VerifyReportsOrphanedTunedRowsAndBadDecisionJson) {
  TempDir dir;
  const std::string path = dir.file("v.db");
  {
    Store store(path);
    store.put_tuned(testing::sample_tuned("spec_orphan", 4.0));   // its binary was never stored
    store.put_decision(decision("spec_bad", "{not json", 1760000000));
  }
  const std::vector<std::string> problems = verify_file(path);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("spec_orphan"), std::string::npos) << problems[0];
  EXPECT_NE(problems[1].find("spec_bad"), std::string::npos) << problems[1];
  testing::write_bytes(dir.file("junk.db"), std::string(3000, 'j'));
  EXPECT_EQ(verify_file(dir.file("junk.db")).size(), 1u);
}

TEST(Maintenance, PruneDeletesOtherDriversAndToolchains) {
  TempDir dir;
  const std::string path = dir.file("p.db");
  {
    Store store(path);
    store.put_binary(testing::sample_binary(1));
    BinaryRecord old_binary = testing::sample_binary(2);
    old_binary.toolchain = "nvrtc=12.8;qattn=0.0.9";
    store.put_binary(old_binary);
    store.put_tuned(testing::sample_tuned("current", 1.0));
    TunedRecord old_driver = testing::sample_tuned("old_driver", 1.0);
    old_driver.device.driver_version = 12080;
    store.put_tuned(old_driver);
    TunedRecord old_toolchain = testing::sample_tuned("old_toolchain", 1.0);
    old_toolchain.toolchain = "nvrtc=12.8;qattn=0.0.9";
    store.put_tuned(old_toolchain);
    store.put_decision(decision("current", "{}", 1760000000));
    store.put_decision(decision("old_driver", "{}", 1760000000, 12080));
  }
  const PruneReport report = prune(path, 13000, testing::kToolchain);
  EXPECT_EQ(report.binaries, 1);
  EXPECT_EQ(report.tuned, 2);
  EXPECT_EQ(report.decisions, 1);
  Store store(path, StoreOptions{true, 1000});
  const Store::Stats stats = store.stats();
  EXPECT_EQ(stats.binary_count, 1);
  EXPECT_EQ(stats.tuned_count, 1);
  EXPECT_EQ(stats.decision_count, 1);
  EXPECT_EQ(store.list_tuned()[0].spec, "current");
  EXPECT_EQ(prune(path, 13000, testing::kToolchain).tuned, 0) << "a second prune finds nothing";
}

}  // namespace
}  // namespace qattn::cache

#include "cache/maintenance.hpp"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>

#include "cache/base64.hpp"
#include "cache/digest.hpp"
#include "cache/open_layer.hpp"
#include "cache/safe_file.hpp"
#include "cache/json_depth.hpp"
#include "cache/schema.hpp"
#include "cache/sqlite.hpp"
#include "cache/store.hpp"

namespace qattn::cache {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kFormat = "qattn-cache-export";
constexpr int kFormatVersion = 1;

// A binary row as stored: the record plus what the file says about it.
struct StoredBinary {
  BinaryRecord record;
  long long image_size = 0;
  std::string image_sha256;
  long long created_at = 0;
};

struct Contents {
  int schema_version = 0;
  std::vector<StoredBinary> binaries;
  std::vector<TunedRecord> tuned;
  std::vector<DecisionRecord> decisions;
};

std::string short_key(const std::string& key) { return key.substr(0, 12); }

// Everything in a cache file, read through read-only connections. Binaries come as stored (no digest
// check here: export and verify decide what to do with a bad one).
Contents read_contents(const std::string& path) {
  Store store(path, StoreOptions{true, 10000});
  Contents contents;
  contents.schema_version = store.stats().schema_version;
  contents.tuned = store.list_tuned();
  contents.decisions = store.list_decisions();
  Database db(path, Database::Options{true, false, 10000});
  Statement query(db, "SELECT key, kernel_name, arch, options, toolchain, image, image_size, image_sha256, registers, "
                      "spill_bytes, smem_bytes, compile_ms, created_at FROM kernel_binary ORDER BY key");
  while (query.step()) {
    StoredBinary b;
    b.record.key = query.column_text(0);
    b.record.kernel_name = query.column_text(1);
    b.record.arch = query.column_text(2);
    b.record.options = query.column_text(3);
    b.record.toolchain = query.column_text(4);
    b.record.image = query.column_blob(5);
    b.image_size = query.column_int64(6);
    b.image_sha256 = query.column_text(7);
    b.record.registers = static_cast<int>(query.column_int64(8));
    b.record.spill_bytes = static_cast<int>(query.column_int64(9));
    b.record.smem_bytes = static_cast<int>(query.column_int64(10));
    b.record.compile_ms = query.column_double(11);
    b.created_at = query.column_int64(12);
    contents.binaries.push_back(std::move(b));
  }
  return contents;
}

bool intact(const StoredBinary& b) {
  return static_cast<long long>(b.record.image.size()) == b.image_size &&
         sha256_hex(b.record.image.data(), b.record.image.size()) == b.image_sha256;
}

// --- JSON ------------------------------------------------------------------------------------------

json device_json(const DeviceKey& d) {
  return {{"name", d.name}, {"cc_major", d.cc_major}, {"cc_minor", d.cc_minor}, {"sm_count", d.sm_count},
          {"driver_version", d.driver_version}};
}

json to_json(const Contents& c) {
  json out = {{"format", kFormat}, {"format_version", kFormatVersion}, {"schema_version", c.schema_version},
              {"binaries", json::array()}, {"tuned", json::array()}, {"decisions", json::array()}};
  for (const auto& b : c.binaries) {
    out["binaries"].push_back({{"key", b.record.key}, {"kernel_name", b.record.kernel_name}, {"arch", b.record.arch},
                               {"options", b.record.options}, {"toolchain", b.record.toolchain},
                               {"image_base64", base64_encode(b.record.image)}, {"image_size", b.image_size},
                               {"image_sha256", b.image_sha256}, {"registers", b.record.registers},
                               {"spill_bytes", b.record.spill_bytes}, {"smem_bytes", b.record.smem_bytes},
                               {"compile_ms", b.record.compile_ms}, {"created_at", b.created_at}});
  }
  for (const auto& t : c.tuned) {
    out["tuned"].push_back({{"spec", t.spec}, {"bucket", t.bucket}, {"device", device_json(t.device)},
                            {"toolchain", t.toolchain}, {"kernel_name", t.kernel_name}, {"binary_key", t.binary_key},
                            {"time_us", t.time_us}, {"candidates_json", t.candidates_json},
                            {"created_at", t.created_at}});
  }
  for (const auto& d : c.decisions) {
    out["decisions"].push_back({{"kind", d.kind}, {"key", d.key}, {"device", device_json(d.device)},
                                {"toolchain", d.toolchain}, {"json", d.json}, {"created_at", d.created_at}});
  }
  return out;
}

// Field readers for import: each names the entry and field of the first problem, in one line.
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw std::invalid_argument("import " + file_ + ": " + where + ": " + what);
  }
  const json& member(const json& object, const char* name, const std::string& where) const {
    if (!object.is_object()) fail(where, "expected an object");
    auto it = object.find(name);
    if (it == object.end()) fail(where, std::string("missing field '") + name + "'");
    return *it;
  }
  std::string text(const json& object, const char* name, const std::string& where, bool non_empty = true) const {
    const json& v = member(object, name, where);
    if (!v.is_string()) fail(where + "." + name, "expected a string");
    if (non_empty && v.get_ref<const std::string&>().empty()) fail(where + "." + name, "must not be empty");
    return v.get<std::string>();
  }
  long long integer(const json& object, const char* name, const std::string& where) const {
    const json& v = member(object, name, where);
    if (!v.is_number_integer()) fail(where + "." + name, "expected an integer");
    return v.get<long long>();
  }
  double number(const json& object, const char* name, const std::string& where) const {
    const json& v = member(object, name, where);
    if (!v.is_number()) fail(where + "." + name, "expected a number");
    return v.get<double>();
  }
  const json& array(const json& object, const char* name) const {
    const json& v = member(object, name, "the top level");
    if (!v.is_array()) fail(name, "expected an array");
    return v;
  }
  DeviceKey device(const json& object, const std::string& where) const {
    const std::string at = where + ".device";
    const json& d = member(object, "device", where);
    return DeviceKey{text(d, "name", at, false), int(integer(d, "cc_major", at)), int(integer(d, "cc_minor", at)),
                     int(integer(d, "sm_count", at)), int(integer(d, "driver_version", at))};
  }

 private:
  std::string file_;
};

Contents from_json(const json& in, const std::string& file) {
  Reader r(file);
  if (!in.is_object() || !in.contains("format") || in["format"] != kFormat) {
    r.fail("the top level", std::string("not a qattn cache export (expected \"format\": \"") + kFormat + "\")");
  }
  if (r.integer(in, "format_version", "the top level") != kFormatVersion) {
    r.fail("format_version", "unsupported; accepted: " + std::to_string(kFormatVersion));
  }
  Contents c;
  c.schema_version = static_cast<int>(r.integer(in, "schema_version", "the top level"));
  const json& binaries = r.array(in, "binaries");
  for (std::size_t i = 0; i < binaries.size(); ++i) {
    const json& b = binaries[i];
    const std::string at = "binaries[" + std::to_string(i) + "]";
    StoredBinary s;
    s.record.key = r.text(b, "key", at);
    s.record.kernel_name = r.text(b, "kernel_name", at);
    s.record.arch = r.text(b, "arch", at);
    s.record.options = r.text(b, "options", at, false);
    s.record.toolchain = r.text(b, "toolchain", at);
    std::optional<std::vector<unsigned char>> image = base64_decode(r.text(b, "image_base64", at));
    if (!image || image->empty()) r.fail(at + ".image_base64", "not valid non-empty base64");
    s.record.image = std::move(*image);
    s.image_size = r.integer(b, "image_size", at);
    s.image_sha256 = r.text(b, "image_sha256", at);
    if (!intact(s)) {
      r.fail(at + " (" + s.record.kernel_name + ")",
             "the image does not match image_size/image_sha256 (" + std::to_string(s.record.image.size()) +
                 " bytes decoded, " + std::to_string(s.image_size) + " declared)");
    }
    s.record.registers = static_cast<int>(r.integer(b, "registers", at));
    s.record.spill_bytes = static_cast<int>(r.integer(b, "spill_bytes", at));
    s.record.smem_bytes = static_cast<int>(r.integer(b, "smem_bytes", at));
    s.record.compile_ms = r.number(b, "compile_ms", at);
    s.created_at = r.integer(b, "created_at", at);
    c.binaries.push_back(std::move(s));
  }
  const json& tuned = r.array(in, "tuned");
  for (std::size_t i = 0; i < tuned.size(); ++i) {
    const json& t = tuned[i];
    const std::string at = "tuned[" + std::to_string(i) + "]";
    TunedRecord rec;
    rec.spec = r.text(t, "spec", at);
    rec.bucket = r.text(t, "bucket", at);
    rec.device = r.device(t, at);
    rec.toolchain = r.text(t, "toolchain", at);
    rec.kernel_name = r.text(t, "kernel_name", at);
    rec.binary_key = r.text(t, "binary_key", at, false);
    rec.time_us = r.number(t, "time_us", at);
    if (!std::isfinite(rec.time_us) || rec.time_us < 0) r.fail(at + ".time_us", "must be finite and >= 0");
    rec.candidates_json = r.text(t, "candidates_json", at, false);
    rec.created_at = r.integer(t, "created_at", at);
    c.tuned.push_back(std::move(rec));
  }
  const json& decisions = r.array(in, "decisions");
  for (std::size_t i = 0; i < decisions.size(); ++i) {
    const json& d = decisions[i];
    const std::string at = "decisions[" + std::to_string(i) + "]";
    DecisionRecord rec;
    rec.kind = r.text(d, "kind", at);
    rec.key = r.text(d, "key", at);
    rec.device = r.device(d, at);
    rec.toolchain = r.text(d, "toolchain", at);
    rec.json = r.text(d, "json", at);
    if (json_too_deep(rec.json)) r.fail(at + ".json", "nests arrays/objects deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    if (json::parse(rec.json, nullptr, false).is_discarded()) r.fail(at + ".json", "is not valid JSON");
    rec.created_at = r.integer(d, "created_at", at);
    c.decisions.push_back(std::move(rec));
  }
  return c;
}

// --- merging rows into a database ------------------------------------------------------------------

std::string tuned_label(const TunedRecord& t) {
  return "tuned " + t.spec + " | " + t.bucket + " | " + t.device.str() + " | " + t.toolchain;
}

// Adds `rows` to `db` under the rules of MergeReport; the caller holds the transaction.
void merge_into(Database& db, const Contents& rows, const std::string& stored_label, const std::string& new_label,
                MergeReport& report) {
  for (const auto& b : rows.binaries) {
    Statement existing(db, "SELECT image_sha256 FROM kernel_binary WHERE key = ?");
    existing.bind(1, b.record.key);
    if (existing.step()) {
      if (existing.column_text(0) != b.image_sha256) {
        report.conflicts.push_back("binary " + short_key(b.record.key) + " (" + b.record.kernel_name + "): " +
                                   stored_label + " and " + new_label + " hold different images; kept " +
                                   stored_label + "'s");
      }
      ++report.unchanged;
      continue;
    }
    Statement insert(db, "INSERT INTO kernel_binary (key, kernel_name, arch, options, toolchain, image, image_size, "
                         "image_sha256, registers, spill_bytes, smem_bytes, compile_ms, created_at) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    insert.bind(1, b.record.key).bind(2, b.record.kernel_name).bind(3, b.record.arch).bind(4, b.record.options);
    insert.bind(5, b.record.toolchain).bind_blob(6, b.record.image.data(), b.record.image.size());
    insert.bind(7, b.image_size).bind(8, b.image_sha256).bind(9, b.record.registers);
    insert.bind(10, b.record.spill_bytes).bind(11, b.record.smem_bytes).bind(12, b.record.compile_ms);
    insert.bind(13, b.created_at).run();
    ++report.binaries_added;
  }
  for (const auto& t : rows.tuned) {
    Statement existing(db, "SELECT kernel_name, time_us FROM tuned_kernel WHERE spec = ? AND bucket = ? AND "
                           "device = ? AND toolchain = ?");
    existing.bind(1, t.spec).bind(2, t.bucket).bind(3, t.device.str()).bind(4, t.toolchain);
    bool replace = true;
    if (existing.step()) {
      const std::string stored_name = existing.column_text(0);
      const double stored_us = existing.column_double(1);
      replace = t.time_us < stored_us;
      if (stored_name != t.kernel_name) {
        char times[96];
        std::snprintf(times, sizeof times, " (%.3f us) vs %s: ", stored_us, new_label.c_str());
        report.conflicts.push_back(tuned_label(t) + ": " + stored_label + " " + stored_name + times + t.kernel_name +
                                   " (" + std::to_string(t.time_us) + " us); kept " +
                                   (replace ? t.kernel_name : stored_name) + ", the faster");
      }
      if (!replace) {
        ++report.unchanged;
        continue;
      }
      ++report.tuned_replaced;
    } else {
      ++report.tuned_added;
    }
    Statement upsert(db, "INSERT OR REPLACE INTO tuned_kernel (spec, bucket, device, toolchain, device_name, cc_major, "
                         "cc_minor, sm_count, driver_version, kernel_name, binary_key, time_us, candidates_json, "
                         "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    upsert.bind(1, t.spec).bind(2, t.bucket).bind(3, t.device.str()).bind(4, t.toolchain).bind(5, t.device.name);
    upsert.bind(6, t.device.cc_major).bind(7, t.device.cc_minor).bind(8, t.device.sm_count);
    upsert.bind(9, t.device.driver_version).bind(10, t.kernel_name).bind(11, t.binary_key).bind(12, t.time_us);
    upsert.bind(13, t.candidates_json).bind(14, t.created_at).run();
  }
  for (const auto& d : rows.decisions) {
    Statement existing(db, "SELECT json, created_at FROM decision WHERE kind = ? AND key = ? AND device = ? AND "
                           "toolchain = ?");
    existing.bind(1, d.kind).bind(2, d.key).bind(3, d.device.str()).bind(4, d.toolchain);
    if (existing.step()) {
      const std::string stored_json = existing.column_text(0);
      const long long stored_at = existing.column_int64(1);
      const bool replace = d.created_at > stored_at;
      if (stored_json != d.json) {
        report.conflicts.push_back("decision " + d.kind + " | " + d.key + " | " + d.device.str() + " | " +
                                   d.toolchain + ": " + stored_label + " " + stored_json + " (created " +
                                   std::to_string(stored_at) + ") vs " + new_label + " " + d.json + " (created " +
                                   std::to_string(d.created_at) + "); kept " + (replace ? new_label : stored_label) +
                                   "'s, the newer");
      }
      if (!replace) {
        ++report.unchanged;
        continue;
      }
      ++report.decisions_replaced;
    } else {
      ++report.decisions_added;
    }
    Statement upsert(db, "INSERT OR REPLACE INTO decision (kind, key, device, toolchain, device_name, cc_major, "
                         "cc_minor, sm_count, driver_version, json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    upsert.bind(1, d.kind).bind(2, d.key).bind(3, d.device.str()).bind(4, d.toolchain).bind(5, d.device.name);
    upsert.bind(6, d.device.cc_major).bind(7, d.device.cc_minor).bind(8, d.device.sm_count);
    upsert.bind(9, d.device.driver_version).bind(10, d.json).bind(11, d.created_at).run();
  }
}

// What may be replaced by an output: the command's own kind of file, or an empty one; never one of the
// command's inputs (writing there would destroy what is being read).
void refuse_input_as_output(const std::string& output, const std::vector<std::string>& inputs) {
  for (const std::string& input : inputs) {
    if (output == input || same_file(output, input)) {
      throw BadPath(output + ": is also an input of this command; write the result to another file");
    }
  }
}

std::string unless_export(const std::string& path) {
  std::string text;
  try {
    text = read_input_file(path, "existing output");
  } catch (const std::exception& e) {
    return "it cannot be checked (" + std::string(e.what()) + ")";
  }
  if (text.empty()) return "";
  if (json_too_deep(text)) return std::string("it is not a ") + kFormat + " JSON file (delete it first, or choose another name)";
  const json parsed = json::parse(text, nullptr, false);
  if (parsed.is_object() && parsed.contains("format") && parsed["format"] == kFormat) return "";
  return std::string("it is not a ") + kFormat + " JSON file (delete it first, or choose another name)";
}

std::string unless_cache(const std::string& path) {
  std::error_code ec;
  if (fs::file_size(path, ec) == 0 && !ec) return "";
  if (looks_like_qattn_cache(path)) return "";
  return "it is not a qattn cache (delete it first, or choose another name)";
}

}  // namespace

std::vector<std::string> export_json(const std::string& db_path, const std::string& json_path) {
  refuse_input_as_output(json_path, {db_path});
  Contents contents = read_contents(db_path);
  std::vector<std::string> skipped;
  std::vector<StoredBinary> sound;
  for (auto& b : contents.binaries) {
    if (intact(b)) {
      sound.push_back(std::move(b));
    } else {
      skipped.push_back("binary " + short_key(b.record.key) + " (" + b.record.kernel_name +
                        ") failed its integrity check and was not exported");
    }
  }
  contents.binaries = std::move(sound);
  write_file_safely(json_path, to_json(contents).dump(1) + "\n", unless_export);
  return skipped;
}

MergeReport import_json(const std::string& json_path, const std::string& db_path) {
  refuse_input_as_output(db_path, {json_path});
  const std::string text = read_input_file(json_path, "import");
  if (json_too_deep(text)) throw std::invalid_argument(json_too_deep_message("import " + json_path));
  json parsed = json::parse(text, nullptr, false);
  if (parsed.is_discarded()) throw std::invalid_argument("import " + json_path + ": not valid JSON");
  const Contents contents = from_json(parsed, json_path);
  { Store create_or_migrate(db_path); }
  Database db(db_path, Database::Options{});
  MergeReport report;
  Transaction transaction(db);
  merge_into(db, contents, db_path, json_path, report);
  transaction.commit();
  return report;
}

MergeReport merge_files(const std::string& a, const std::string& b, const std::string& out) {
  refuse_input_as_output(out, {a, b});
  const Contents first = read_contents(a);
  const Contents second = read_contents(b);
  const std::string tmp = create_temporary_beside(out, unless_cache);   // empty: SQLite makes it a database
  MergeReport report;
  try {
    {
      Database db(tmp, Database::Options{});
      migrate_to_current(db);   // a fresh file in rollback-journal mode: one file to rename
      Transaction transaction(db);
      merge_into(db, first, out, a, report);
      merge_into(db, second, a, b, report);
      transaction.commit();
    }
    replace_with_temporary(tmp, out);
  } catch (...) {
    remove_quietly(tmp);
    throw;
  }
  return report;
}

std::vector<BinaryRecord> read_binaries(const std::string& db_path) {
  std::vector<BinaryRecord> out;
  for (StoredBinary& b : read_contents(db_path).binaries) out.push_back(std::move(b.record));
  return out;
}

std::vector<std::string> verify_file(const std::string& db_path) {
  std::vector<std::string> problems;
  std::unique_ptr<Database> db;
  try {
    db = std::make_unique<Database>(db_path, Database::Options{true, false, 10000});
    Statement check(*db, "PRAGMA quick_check");
    while (check.step()) {
      const std::string line = check.column_text(0);
      if (line != "ok") problems.push_back("sqlite quick_check: " + line);
    }
    if (!problems.empty()) return problems;
    const SchemaInfo schema = inspect_schema(*db);
    if (schema.schema_version < kOldestReadOnlyVersion) {
      problems.push_back("schema " + std::string(schema.schema_version < 0 ? "empty" : "v0") +
                         ": not a current qattn cache (open it with qattn once to create or migrate it)");
      return problems;
    }
  } catch (const CacheError& error) {
    problems.push_back(error.what());
    return problems;
  }
  Statement binaries(*db, "SELECT key, kernel_name, image, image_size, image_sha256 FROM kernel_binary ORDER BY key");
  while (binaries.step()) {
    StoredBinary b;
    b.record.key = binaries.column_text(0);
    b.record.kernel_name = binaries.column_text(1);
    b.record.image = binaries.column_blob(2);
    b.image_size = binaries.column_int64(3);
    b.image_sha256 = binaries.column_text(4);
    if (!intact(b)) {
      problems.push_back("binary " + short_key(b.record.key) + " (" + b.record.kernel_name + "): stored " +
                         std::to_string(b.image_size) + " bytes with sha256 " + b.image_sha256.substr(0, 12) +
                         "..., the image has " + std::to_string(b.record.image.size()) + " bytes with sha256 " +
                         sha256_hex(b.record.image.data(), b.record.image.size()).substr(0, 12) + "...");
    }
  }
  Statement orphans(*db, "SELECT spec, bucket, device, toolchain, kernel_name, binary_key FROM tuned_kernel "
                         "WHERE binary_key NOT IN (SELECT key FROM kernel_binary) ORDER BY spec, bucket, device");
  while (orphans.step()) {
    problems.push_back("tuned " + orphans.column_text(0) + " | " + orphans.column_text(1) + " | " +
                       orphans.column_text(2) + ": its binary " + short_key(orphans.column_text(5)) + " (" +
                       orphans.column_text(4) + ") is not in the file");
  }
  Statement has_decisions(*db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'decision'");
  if (has_decisions.step()) {
    Statement decisions(*db, "SELECT kind, key, device, json FROM decision ORDER BY kind, key, device, toolchain");
    while (decisions.step()) {
      const std::string text = decisions.column_text(3);
      if (json_too_deep(text) || json::parse(text, nullptr, false).is_discarded()) {
        problems.push_back("decision " + decisions.column_text(0) + " | " + decisions.column_text(1) + " | " +
                           decisions.column_text(2) + ": its json does not parse");
      }
    }
  }
  return problems;
}

PruneReport prune(const std::string& db_path, int keep_driver, const std::string& keep_toolchain) {
  if (!fs::exists(db_path)) throw CacheError("qattn cache: " + db_path + ": prune failed: the file does not exist");
  { Store migrate(db_path); }
  Database db(db_path, Database::Options{});
  PruneReport report;
  Transaction transaction(db);
  Statement tuned(db, "DELETE FROM tuned_kernel WHERE (?1 != 0 AND driver_version != ?1) OR "
                      "(?2 != '' AND toolchain != ?2)");
  tuned.bind(1, keep_driver).bind(2, keep_toolchain).run();
  report.tuned = db.changes();
  Statement decisions(db, "DELETE FROM decision WHERE (?1 != 0 AND driver_version != ?1) OR "
                          "(?2 != '' AND toolchain != ?2)");
  decisions.bind(1, keep_driver).bind(2, keep_toolchain).run();
  report.decisions = db.changes();
  Statement binaries(db, "DELETE FROM kernel_binary WHERE ?1 != '' AND toolchain != ?1");
  binaries.bind(1, keep_toolchain).run();
  report.binaries = db.changes();
  transaction.commit();
  return report;
}

}  // namespace qattn::cache

// Whole-file maintenance behind `qattn cache export|import|merge|verify|prune`: moving a tuned cache
// between machines (JSON), combining caches, checking one, and dropping entries of other drivers or
// toolchains. Every write is all or nothing: one transaction, or a temporary file renamed into place
// (cache/safe_file.hpp). An output that is one of the inputs, or an existing file of another kind than
// the command makes (export: a qattn-cache-export JSON; merge: a qattn cache; an empty file is fine), is
// refused with BadPath (std::invalid_argument) before anything is written.
//
// Export JSON format (format_version 1), one object:
//   { "format": "qattn-cache-export", "format_version": 1, "schema_version": <of the exported file>,
//     "binaries":  [ { "key", "kernel_name", "arch", "options", "toolchain", "image_base64", "image_size",
//                      "image_sha256", "registers", "spill_bytes", "smem_bytes", "compile_ms", "created_at" } ],
//     "tuned":     [ { "spec", "bucket", "device": DEVICE, "toolchain", "kernel_name", "binary_key",
//                      "time_us", "candidates_json", "created_at" } ],
//     "decisions": [ { "kind", "key", "device": DEVICE, "toolchain", "json", "created_at" } ] }
//   DEVICE = { "name", "cc_major", "cc_minor", "sm_count", "driver_version" }
// Arrays are in primary-key order; image_sha256 is lowercase hex of the decoded image.
#pragma once
#include <string>
#include <vector>

#include "cache/store.hpp"

namespace qattn::cache {

// How rows from one source went into a target. On the same key: binaries keep the stored one (same key
// means same source, options, arch and toolchain), tuned rows keep the faster winner (the stored one
// on a tie), decisions keep the newer created_at (the stored one on a tie).
struct MergeReport {
  long long binaries_added = 0, tuned_added = 0, tuned_replaced = 0, decisions_added = 0, decisions_replaced = 0;
  long long unchanged = 0;                 // rows already present, or losing to the stored row
  std::vector<std::string> conflicts;      // one line per key whose rows disagreed, and which was kept
};

// Writes every row of `db_path` (opened read-only) to `json_path` (temporary file + rename). Binaries
// failing their integrity check are not exported; one line each is returned.
std::vector<std::string> export_json(const std::string& db_path, const std::string& json_path);

// Validates the whole file first (format, every field's presence and type, base64, each image's size
// and sha256, decision JSON), then adds every row to `db_path` (created when missing) in one
// transaction. Throws std::invalid_argument naming the first bad entry and field; nothing is written.
// The JSON must be a regular file of at most kMaxInputFileBytes (cache/safe_file.hpp).
MergeReport import_json(const std::string& json_path, const std::string& db_path);

// The union of `a` and `b` (both opened read-only) written to `out` through a temporary file and a
// rename; rows of `a` go in first, so on a tie `a` is kept.
MergeReport merge_files(const std::string& a, const std::string& b, const std::string& out);

// Every problem found, one line each; empty when the file is sound: SQLite's quick_check, the schema
// version, each binary's size and sha256, each tuned row's binary present, each decision's JSON.
std::vector<std::string> verify_file(const std::string& db_path);

// Every binary row as stored (read-only; no digest check), ordered by key: what `verify --recompile`
// rebuilds and compares (runtime/jit/recompile_check.hpp).
std::vector<BinaryRecord> read_binaries(const std::string& db_path);

// Deletes tuned rows and decisions measured under a driver other than keep_driver (0: any driver is
// kept) or made by another toolchain than keep_toolchain ("": any), and binaries of other toolchains,
// in one transaction.
struct PruneReport {
  long long binaries = 0, tuned = 0, decisions = 0;   // rows deleted
};
PruneReport prune(const std::string& db_path, int keep_driver, const std::string& keep_toolchain);

}  // namespace qattn::cache

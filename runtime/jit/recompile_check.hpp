// `qattn cache verify --recompile`: proves that each stored binary is what this qattn and this NVRTC
// build from the kernel it is stored for. The digest check of `cache verify` only catches accidental
// damage: whoever can write the file can replace a cubin together with its digest. Here every binary
// of the current toolchain is rebuilt from its kernel name (parse_kernel_name gives back the spec and
// tiling, or the helper kernel's fields) and its arch, and must come out byte for byte the same, under
// the same key. NVRTC is deterministic for one source, option list and library for most kernels (the
// test compiles one kernel twice), so no section needs masking; for a few large ones (FlashQ's GEMV
// decode) its output depends on the compiling process's memory layout, and such a row, whose two
// rebuilds differ from each other, is not checkable (docs/reliability.md).
#pragma once
#include <string>
#include <vector>

#include "generator/render.hpp"

namespace qattn::rt {

struct RecompileOptions {
  unsigned jobs = 0;     // compile threads (0: one per core)
  std::string filter;    // ECMAScript regex searched in the kernel name; empty: every binary
};

struct RecompileEntry {
  enum class Status { matched, mismatched, not_checkable };
  Status status = Status::matched;
  std::string key, kernel_name, arch, toolchain;
  std::string detail;    // mismatched / not_checkable: one line saying why
};

struct RecompileReport {
  long long checked = 0, matched = 0, mismatched = 0, not_checkable = 0;   // checked = the other three
  long long filtered_out = 0;                                             // rows the filter skipped
  std::string toolchain;                                                  // the current one
  std::vector<RecompileEntry> entries;                                    // in key order
};
const char* to_string(RecompileEntry::Status status);

// The source this qattn renders for the kernel `kernel_name` on `arch`, or a one-line reason in *why
// (a name no kernel of this qattn has). The source's kernel name is always `kernel_name`.
bool rebuild_source(const std::string& kernel_name, const std::string& arch, gen::Source* out, std::string* why);

// Reads every binary of `db_path` (read-only) and checks it as the top says. Rows of another toolchain
// are not_checkable (they cannot be rebuilt identically here), and so are rows whose kernel builds
// differently each time (see the top). A row of the current toolchain that cannot be rebuilt, whose key
// is not its rebuilt source's key, whose image differs from two agreeing rebuilds, or whose stored
// register or spill count differs from the rebuilt one's (where both are known), is mismatched.
// Throws std::invalid_argument for a bad filter, cache::CacheError for an unreadable file.
RecompileReport recompile_check(const std::string& db_path, const RecompileOptions& options = {});

}  // namespace qattn::rt

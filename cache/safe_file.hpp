// Every file qattn writes or reads whole (exports, merge results, kernel sources, grids, imports) goes
// through here, so that the rules of docs/reliability.md hold in one place:
//
// Writing `path`:
//   - missing or a regular file: the bytes go to a temporary file created with exclusive creation
//     (O_CREAT|O_EXCL, which never follows a link; unpredictable name) in the same directory, then renamed onto `path`:
//     a reader sees the old file or the new one, never half of one, and no existing file or link is
//     ever opened for writing under a guessable name.
//   - a character device or a FIFO (/dev/null, /dev/stdout, a pipe): written through, never replaced.
//   - a symbolic link (other than to a device or FIFO), a directory, a block device, a socket: refused.
// Reading: regular files only (a FIFO would block, /dev/zero never ends), at most kMaxInputFileBytes.
//
// A refusal is BadPath (std::invalid_argument: the caller's input was wrong, exit 2 on the CLI); an I/O
// failure (disk full, permission denied) is std::runtime_error.
#pragma once
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace qattn::cache {

class BadPath : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

constexpr std::uintmax_t kMaxInputFileBytes = 256ull << 20;   // grids and imports; see docs/reliability.md

// Given an existing regular file about to be replaced, returns "" when it may be, else why not
// (e.g. "it is not a qattn cache export").
using ReplaceCheck = std::function<std::string(const std::string& path)>;

// Writes `bytes` to `path` by the rules above. `replace_check` (optional) is asked before an existing
// regular file is replaced.
void write_file_safely(const std::string& path, const std::string& bytes, const ReplaceCheck& replace_check = {});

// For writers that need a file name (SQLite): creates an empty file beside `path` by exclusive
// creation and returns its name. Refuses (BadPath) a `path` that is not missing or a regular file.
std::string create_temporary_beside(const std::string& path, const ReplaceCheck& replace_check = {});
// Renames `temporary` onto `path` (removing `temporary` and its SQLite companions on failure).
void replace_with_temporary(const std::string& temporary, const std::string& path);
// Removes `path` and its SQLite companions (-journal, -wal, -shm), ignoring errors.
void remove_quietly(const std::string& path);

// The whole content of a regular file of at most `max_bytes`; `what` names it in errors ("--grid").
std::string read_input_file(const std::string& path, const std::string& what,
                            std::uintmax_t max_bytes = kMaxInputFileBytes);

// True when `a` and `b` name the same existing file (same device and inode, links followed).
bool same_file(const std::string& a, const std::string& b);

}  // namespace qattn::cache

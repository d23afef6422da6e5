// What qattn does with a cache file it cannot use: the whole policy, in one place. Every case ends in a
// usable state and one line (the note) saying what was wrong and what qattn did:
//
//   problem (CacheError::Kind)              user layer                          shipped layer
//   damaged qattn cache: corrupt,           renamed to <name>.corrupt-<UTC>      not used (never renamed:
//     truncated (looks_like_qattn_cache)     (with its -wal/-shm), a fresh file    it belongs to the
//                                            is created in its place               application)
//   not a qattn cache: another program's    not used, left as it is; refused     not used, left as it is
//     file or database, a FIFO, a device     (bad input) when named explicitly
//   future_schema (newer qattn)             not used, left as it is               not used, left as it is
//   busy (locked by another process)        not used for this process             not used
//   unwritable (read-only file/directory)   used read-only, nothing is written    (always read-only)
//   anything else                           not used, left as it is               not used
//
// A file set aside is never deleted or modified, only renamed. A read-only user open (RuntimeOptions::
// read_only) renames nothing either.
#pragma once
#include <memory>
#include <string>

#include "cache/layered_store.hpp"
#include "cache/store.hpp"

namespace qattn::cache {

struct OpenedLayer {
  std::unique_ptr<Store> store;   // null: go on without this layer
  std::string note;               // one line when something was wrong, "" when the open was clean
  bool refused = false;           // the file is not a qattn cache (not_a_cache): it was left as it is
};

// True when `path` is, or was before damage, a qattn cache: a SQLite file header (its magic, or the fixed
// bytes 21..23 when the magic is what was damaged) and qattn's tables in the schema text of page 1.
// Only such a file is ever set aside; anything else that fails to open is left as it is.
bool looks_like_qattn_cache(const std::string& path);

OpenedLayer open_user_layer(const std::string& path, StoreOptions options = {});
OpenedLayer open_shipped_layer(const std::string& path, int busy_timeout_ms = 10000);

// Both layers (an empty path: no such layer) with their notes as the first warnings. With
// refuse_foreign_user_file (the caller named the user path explicitly), a user file that is not a qattn
// cache throws CacheError (Kind::not_a_cache, the one-line note) instead of going on without it.
std::unique_ptr<LayeredStore> open_layers(const std::string& user_path, const std::string& shipped_path,
                                          StoreOptions user_options = {}, bool refuse_foreign_user_file = false);

// Renames `path` (and its -wal/-shm files when present) to "<path>.corrupt-<YYYYmmddTHHMMSSZ>[-N]" and
// returns the new name of `path`. Throws CacheError when the rename fails (nothing was renamed then).
std::string set_aside(const std::string& path);

}  // namespace qattn::cache

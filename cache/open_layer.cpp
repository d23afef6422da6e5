#include "cache/open_layer.hpp"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace qattn::cache {
namespace {

namespace fs = std::filesystem;

std::string utc_stamp() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%dT%H%M%SZ", &utc);
  return text;
}

// The error without its "qattn cache: <path>: " prefix, and without the advice a plain open gives ("it
// was left untouched: move it away ...") when the policy does something else with the file.
std::string cause_of(const std::exception& error, const std::string& path) {
  std::string text = error.what();
  const std::string prefix = "qattn cache: " + path + ": ";
  if (text.compare(0, prefix.size(), prefix) == 0) text.erase(0, prefix.size());
  const std::size_t advice = text.find("left untouched");
  if (advice == std::string::npos) return text;
  const std::size_t cut = text.find_last_of(";.", advice);
  if (cut == std::string::npos) return text;
  const std::size_t open = text.rfind('(', cut), close = text.rfind(')', cut);
  const bool in_parentheses = open != std::string::npos && (close == std::string::npos || close < open);
  if (in_parentheses && text[cut] == ';') {
    text.erase(cut, text.find(')', advice) - cut);   // "(cause; it was left untouched: ...)" -> "(cause)"
  } else {
    text.erase(text[cut] == '.' ? cut + 1 : cut);
  }
  return text;
}

CacheError::Kind kind_of(const std::exception& error) {
  const auto* cache_error = dynamic_cast<const CacheError*>(&error);
  return cache_error ? cache_error->kind() : CacheError::Kind::other;
}

std::string head(const std::string& path) { return "qattn cache: " + path + ": "; }

bool contains(const std::string& text, const char* needle) { return text.find(needle) != std::string::npos; }

}  // namespace

bool looks_like_qattn_cache(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::string start(64 * 1024, '\0');   // the largest SQLite page: page 1 holds the schema's text
  in.read(&start[0], static_cast<std::streamsize>(start.size()));
  start.resize(static_cast<std::size_t>(in.gcount()));
  if (start.size() < 100) return false;
  // The header: its magic, or (when the magic itself is what was damaged) the three payload fractions
  // every SQLite file has at offsets 21..23.
  const bool sqlite_header = start.compare(0, 16, std::string("SQLite format 3\0", 16)) == 0 ||
                             (start[21] == 64 && start[22] == 32 && start[23] == 32);
  const bool current_schema = contains(start, "CREATE TABLE meta") && contains(start, "CREATE TABLE kernel_binary");
  const bool prototype_schema = contains(start, "CREATE TABLE binaries") && contains(start, "CREATE TABLE tuned");
  return sqlite_header && (current_schema || prototype_schema);
}

std::string set_aside(const std::string& path) {
  const std::string base = path + ".corrupt-" + utc_stamp();
  std::string target = base;
  for (int n = 2; fs::exists(target) || fs::exists(target + "-wal"); ++n) target = base + "-" + std::to_string(n);
  std::error_code ec;
  fs::rename(path, target, ec);
  if (ec) throw CacheError(head(path) + "cannot rename it to " + target + ": " + ec.message());
  // A stale -wal next to a fresh file would be replayed into it: move the companions along.
  for (const char* suffix : {"-wal", "-shm"}) {
    if (fs::exists(path + suffix, ec)) fs::rename(path + suffix, target + suffix, ec);
  }
  return target;
}

OpenedLayer open_user_layer(const std::string& path, StoreOptions options) {
  OpenedLayer opened;
  try {
    opened.store = std::make_unique<Store>(path, options);
    return opened;
  } catch (const std::exception& error) {
    const std::string cause = cause_of(error, path);
    switch (kind_of(error)) {
      case CacheError::Kind::damaged: {
        if (!looks_like_qattn_cache(path)) {
          opened.refused = true;
          opened.note = head(path) + "not a qattn cache (" + cause +
                        "); it was left as it is, going on without the user cache (name another --db / cache path)";
          return opened;
        }
        if (options.read_only) {
          opened.note = head(path) + cause + "; not used (opened read-only, so it was not set aside)";
          return opened;
        }
        std::string aside;
        try {
          aside = set_aside(path);
        } catch (const std::exception& rename_error) {
          opened.note = head(path) + cause + "; could not set it aside (" + cause_of(rename_error, path) +
                        "), going on without the user cache";
          return opened;
        }
        try {
          opened.store = std::make_unique<Store>(path, options);
          opened.note = head(path) + cause + "; moved it to " + aside + " and started a fresh cache";
        } catch (const std::exception& fresh_error) {
          opened.note = head(path) + cause + "; moved it to " + aside + ", but a fresh cache failed too (" +
                        cause_of(fresh_error, path) + "), going on without the user cache";
        }
        return opened;
      }
      case CacheError::Kind::unwritable:
        if (!options.read_only) {
          try {
            opened.store = std::make_unique<Store>(path, StoreOptions{true, options.busy_timeout_ms});
            opened.note = head(path) + cause + "; using it read-only, new binaries and tuning results are not stored";
            return opened;
          } catch (const std::exception&) {
            // Fall through: no readable file either (e.g. it does not exist in a read-only directory).
          }
        }
        opened.note = head(path) + cause + "; going on without the user cache";
        return opened;
      case CacheError::Kind::busy:
        opened.note = head(path) + "locked by another process (" + cause +
                      "); going on without the user cache, nothing is read from or written to it";
        return opened;
      case CacheError::Kind::not_a_cache:
        opened.refused = true;
        opened.note = head(path) + cause + "; it was left as it is, going on without the user cache";
        return opened;
      case CacheError::Kind::future_schema:
      case CacheError::Kind::other:
        opened.note = head(path) + cause + "; going on without the user cache, the file was left as it is";
        return opened;
    }
  }
  return opened;
}

OpenedLayer open_shipped_layer(const std::string& path, int busy_timeout_ms) {
  OpenedLayer opened;
  try {
    opened.store = std::make_unique<Store>(path, StoreOptions{true, busy_timeout_ms});
  } catch (const std::exception& error) {
    const std::string cause = cause_of(error, path);
    opened.note = head(path) + (kind_of(error) == CacheError::Kind::busy ? "locked by another process (" + cause + ")"
                                                                        : cause) +
                  "; going on without the shipped cache, the file was left as it is";
  }
  return opened;
}

std::unique_ptr<LayeredStore> open_layers(const std::string& user_path, const std::string& shipped_path,
                                          StoreOptions user_options, bool refuse_foreign_user_file) {
  OpenedLayer user, shipped;
  if (!user_path.empty()) user = open_user_layer(user_path, user_options);
  if (user.refused && refuse_foreign_user_file) {
    const std::string left = "; it was left as it is";   // what follows ("going on without ...") is not done
    const std::size_t end = user.note.find(left);
    throw CacheError(end == std::string::npos ? user.note : user.note.substr(0, end + left.size()), 0,
                     CacheError::Kind::not_a_cache);
  }
  if (!shipped_path.empty()) shipped = open_shipped_layer(shipped_path, user_options.busy_timeout_ms);
  return std::make_unique<LayeredStore>(std::move(user.store), std::move(shipped.store),
                                        std::vector<std::string>{user.note, shipped.note});
}

}  // namespace qattn::cache

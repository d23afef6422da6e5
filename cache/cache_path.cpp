#include <pwd.h>
#include <unistd.h>

#include <string>

#include "cache/store.hpp"
#include "env/env.hpp"

namespace qattn::cache {

std::string default_cache_path() {
  if (std::string dir = env::cache_dir(); !dir.empty()) return dir + "/qattn.db";
  // The XDG base-directory spec says to ignore relative paths in these variables.
  if (std::string dir = env::xdg_cache_home(); !dir.empty() && dir[0] == '/') {
    return dir + "/qattn/qattn.db";
  }
  std::string home = env::home();
  if (home.empty()) {
    if (const passwd* entry = ::getpwuid(::getuid()); entry && entry->pw_dir) home = entry->pw_dir;
  }
  if (home.empty()) {
    throw CacheError("qattn cache: no cache location: QATTN_CACHE_DIR, XDG_CACHE_HOME and HOME are unset "
                     "and the user has no home directory; set QATTN_CACHE_DIR");
  }
  return home + "/.cache/qattn/qattn.db";
}

}  // namespace qattn::cache

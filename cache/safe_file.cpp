#include "cache/safe_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace qattn::cache {
namespace {

enum class Target { missing, regular, stream };

std::string system_error_text(int error) { return std::strerror(error); }

std::string kind_of_file(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

Target classify_output(const std::string& path) {
  if (path.empty()) throw BadPath("empty output path");
  struct stat link {};
  if (::lstat(path.c_str(), &link) != 0) {
    if (errno == ENOENT) return Target::missing;
    throw BadPath(path + ": cannot inspect the output path: " + system_error_text(errno));
  }
  if (S_ISREG(link.st_mode)) return Target::regular;
  if (S_ISCHR(link.st_mode) || S_ISFIFO(link.st_mode)) return Target::stream;
  if (S_ISLNK(link.st_mode)) {
    // A link to a device or a pipe (/dev/stdout, /dev/fd/N) is written through: nothing is replaced.
    struct stat target {};
    if (::stat(path.c_str(), &target) == 0 && (S_ISCHR(target.st_mode) || S_ISFIFO(target.st_mode))) {
      return Target::stream;
    }
    throw BadPath(path + ": is a symbolic link; qattn never writes through one (name the file it points to)");
  }
  throw BadPath(path + ": is " + kind_of_file(link.st_mode) +
                "; accepted output: a regular file (replaced whole), a character device or a FIFO");
}

void write_all(int fd, const std::string& bytes, const std::string& name) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(name + ": write failed: " + system_error_text(n < 0 ? errno : EIO));
    done += static_cast<std::size_t>(n);
  }
}

void write_through(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": cannot open for writing: " + system_error_text(errno));
  struct stat opened {};
  if (::fstat(fd, &opened) != 0 || !(S_ISCHR(opened.st_mode) || S_ISFIFO(opened.st_mode))) {
    ::close(fd);   // swapped for something else since it was inspected: write nothing
    throw BadPath(path + ": changed while being opened; it is no longer a device or FIFO");
  }
  try {
    write_all(fd, bytes, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

// The process umask, without changing it (umask(2) can only be read by setting it, which races with
// other threads creating files).
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Umask:", 0) == 0) return static_cast<mode_t>(std::strtoul(line.c_str() + 6, nullptr, 8));
  }
  return 022;
}

std::string directory_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_name_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Opens a new file beside `path` with exclusive creation (mkostemp: O_CREAT|O_EXCL, a random suffix),
// with the mode the replaced file had, or the one a plain create would give.
int open_temporary_beside(const std::string& path, std::string& name) {
  std::string pattern = directory_of(path) + "/." + base_name_of(path) + ".tmp-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  const int fd = ::mkostemp(buffer.data(), O_CLOEXEC);
  if (fd < 0) {
    throw std::runtime_error(path + ": cannot create a temporary file in " + directory_of(path) + ": " +
                             system_error_text(errno));
  }
  name = buffer.data();
  struct stat existing {};
  const mode_t mode = ::stat(path.c_str(), &existing) == 0 ? (existing.st_mode & 07777) : (0666 & ~current_umask());
  ::fchmod(fd, mode);
  return fd;
}

void check_replace(const std::string& path, Target target, const ReplaceCheck& replace_check) {
  if (target != Target::regular || !replace_check) return;
  const std::string why_not = replace_check(path);
  if (!why_not.empty()) throw BadPath(path + ": refusing to replace it: " + why_not);
}

}  // namespace

void remove_quietly(const std::string& path) {
  for (const char* suffix : {"", "-journal", "-wal", "-shm"}) ::unlink((path + suffix).c_str());
}

void write_file_safely(const std::string& path, const std::string& bytes, const ReplaceCheck& replace_check) {
  const Target target = classify_output(path);
  if (target == Target::stream) return write_through(path, bytes);
  check_replace(path, target, replace_check);
  std::string temporary;
  const int fd = open_temporary_beside(path, temporary);
  try {
    write_all(fd, bytes, temporary);
    if (::fsync(fd) != 0) throw std::runtime_error(temporary + ": fsync failed: " + system_error_text(errno));
  } catch (...) {
    ::close(fd);
    remove_quietly(temporary);
    throw;
  }
  if (::close(fd) != 0) {
    remove_quietly(temporary);
    throw std::runtime_error(temporary + ": write failed (disk full?): " + system_error_text(errno));
  }
  replace_with_temporary(temporary, path);
}

std::string create_temporary_beside(const std::string& path, const ReplaceCheck& replace_check) {
  const Target target = classify_output(path);
  if (target == Target::stream) {
    throw BadPath(path + ": is a device or FIFO; this output must be a regular file (it is a database)");
  }
  check_replace(path, target, replace_check);
  std::string temporary;
  ::close(open_temporary_beside(path, temporary));
  return temporary;
}

void replace_with_temporary(const std::string& temporary, const std::string& path) {
  // rename(2) replaces a link itself, never what it points to; classify_output refused links already.
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    remove_quietly(temporary);
    throw std::runtime_error("cannot rename " + temporary + " to " + path + ": " + system_error_text(error));
  }
}

std::string read_input_file(const std::string& path, const std::string& what, std::uintmax_t max_bytes) {
  const std::string head = what + " " + path + ": ";
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) throw BadPath(head + "cannot read the file (cannot open it: " + system_error_text(errno) + ")");
  if (!S_ISREG(info.st_mode)) {
    throw BadPath(head + "is " + kind_of_file(info.st_mode) + "; accepted: a regular file");
  }
  if (static_cast<std::uintmax_t>(info.st_size) > max_bytes) {
    throw BadPath(head + "is " + std::to_string(info.st_size) + " bytes; accepted: at most " +
                  std::to_string(max_bytes) + " bytes");
  }
  // O_NONBLOCK: should the path have become a FIFO since the stat, open does not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw BadPath(head + "cannot read the file (cannot open it: " + system_error_text(errno) + ")");
  struct stat opened {};
  if (::fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode)) {
    ::close(fd);
    throw BadPath(head + "changed while being opened; accepted: a regular file");
  }
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      throw BadPath(head + "read failed: " + system_error_text(error));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > max_bytes) {
      ::close(fd);
      throw BadPath(head + "grew past " + std::to_string(max_bytes) + " bytes while being read");
    }
  }
  ::close(fd);
  return text;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace qattn::cache

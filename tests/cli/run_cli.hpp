// Runs the built qattn tool through the shell, as a user would, with stdout and stderr kept apart.
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/cache/cache_test_support.hpp"

namespace qattn::cli::testing {

struct Outcome {
  int code = -1;
  std::string out, err;
};

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// `args` is shell text after the tool's name. The cache directory points into a fresh temporary
// directory, so no test reads or writes the user's cache; `timeout` turns a hang (e.g. a FIFO opened
// for reading) into a failure instead of a stuck suite.
inline Outcome run_cli(const std::string& args) {
  cache::testing::TempDir dir;
  const std::string out = dir.file("stdout"), err = dir.file("stderr");
  const std::string cmd = "cd " + dir.path() + " && QATTN_CACHE_DIR=" + dir.path() + " timeout 300 " + QATTN_CLI_PATH + " " + args +
                          " >" + out + " 2>" + err + " </dev/null";
  const int status = std::system(cmd.c_str());
  Outcome o;
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  o.out = read_text(out);
  o.err = read_text(err);
  return o;
}

inline bool one_line(const std::string& text) { return !text.empty() && text.find('\n') == text.size() - 1; }

}  // namespace qattn::cli::testing

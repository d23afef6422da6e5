// Helpers shared by the cache tests: temporary directories, file bytes, sample records with non-zero
// contents, and running a function in a child process.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "cache/store.hpp"

namespace qattn::cache::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/qattn-cache-test-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (!::mkdtemp(buffer.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = buffer.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

// Deterministic bytes that differ per seed and are never all zero (a plausible stand-in for a cubin).
inline std::vector<unsigned char> pseudo_image(unsigned seed, std::size_t size) {
  std::vector<unsigned char> image(size);
  unsigned state = seed * 2654435761u + 12345u;
  for (auto& byte : image) {
    state = state * 1103515245u + 12345u;
    byte = static_cast<unsigned char>((state >> 16) | 1u);
  }
  return image;
}

inline const std::string kToolchain = "nvrtc=13.0;qattn=0.1.0;templates=0123abcd";

inline DeviceKey h100() { return DeviceKey{"NVIDIA H100 80GB HBM3", 9, 0, 132, 13000}; }

inline BinaryRecord sample_binary(unsigned seed, std::size_t image_size = 3000) {
  BinaryRecord record;
  record.kernel_name = "qattn_sm90_fwd_qi8_ki8_vf8_of16_d128__tq128_tkv64_w4_s2_n" + std::to_string(seed);
  record.arch = "sm_90";
  record.options = "-std=c++17\n-arch=sm_90";
  record.toolchain = kToolchain;
  record.key = binary_key("// source " + std::to_string(seed), {"-std=c++17", "-arch=sm_90"}, record.arch,
                          record.toolchain);
  record.image = pseudo_image(seed, image_size);
  record.registers = 96 + static_cast<int>(seed % 32);
  record.spill_bytes = static_cast<int>(seed % 3) * 8;
  record.smem_bytes = 49152 + static_cast<int>(seed);
  record.compile_ms = 120.5 + seed;
  return record;
}

inline TunedRecord sample_tuned(const std::string& spec, double time_us) {
  TunedRecord record;
  record.spec = spec;
  record.bucket = "b1_q4096_kv4096";
  record.device = h100();
  record.toolchain = kToolchain;
  record.kernel_name = spec + "__tq128_tkv64_w4_s2";
  record.binary_key = binary_key("// " + spec, {"-arch=sm_90"}, "sm_90", kToolchain);
  record.time_us = time_us;
  record.candidates_json = R"([{"tiling":"tq128_tkv64_w4_s2","time_us":)" + std::to_string(time_us) + "}]";
  record.created_at = 1760000000;
  return record;
}

// Runs `body` in a forked child; its return value (or 99 for an exception, after printing it) is the
// child's exit status. Call only when this process has no open database connections and no threads.
inline pid_t start_child(const std::function<int()>& body) {
  std::fflush(nullptr);   // or buffered test output would be printed twice
  pid_t pid = ::fork();
  if (pid == 0) {
    int status = 98;
    try {
      status = body();
    } catch (const std::exception& error) {
      std::fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), error.what());
      status = 99;
    }
    std::fflush(nullptr);
    ::_exit(status);   // skips the parent's gtest teardown and atexit handlers
  }
  return pid;
}

// The child's exit status, or -1 when it did not exit normally.
inline int wait_child(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace qattn::cache::testing

// qattn_fuzz: random and mutated input through every text parser and the cache's public entry points.
// Checks, per input: no crash (a signal prints the input and exits 70), no hang (a watchdog prints the
// input and exits 71 when one input takes longer than --per-input-ms), every rejection is a
// qattn::Error of kind bad_input (cache files: a std::exception, as cache/store.hpp documents), and
// parse(to_string(x)) == x for every accepted spec, problem, tiling and kernel name.
// Usage and options: docs/testing.md. Exit 0 when clean, 1 on a failed check.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "cache/keys.hpp"
#include "cache/maintenance.hpp"
#include "cache/sqlite.hpp"
#include "cache/store.hpp"
#include "generator/search_space.hpp"
#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/pretune.hpp"
#include "qattn/problem.hpp"
#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"
#include "qattn/validate.hpp"

namespace fs = std::filesystem;
using namespace qattn;

namespace {

// The input being tried, for the crash and hang reports (a signal handler may only write() it).
char g_current[4096];
size_t g_current_len = 0;
const char* g_current_kind = "";
std::atomic<long long> g_started_ms{0};   // 0: between inputs

long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void set_current(const char* kind, const std::string& text) {
  g_current_kind = kind;
  g_current_len = std::min(text.size(), sizeof g_current);
  std::memcpy(g_current, text.data(), g_current_len);
}

void write_str(const char* s) { (void)!write(2, s, std::strlen(s)); }
void report_input(const char* what) {
  write_str("qattn_fuzz: ");
  write_str(what);
  write_str(" on a ");
  write_str(g_current_kind);
  write_str(" input (first 4096 bytes follow)\n");
  (void)!write(2, g_current, g_current_len);
  write_str("\n");
}

void on_signal(int sig) {
  report_input(sig == SIGSEGV ? "CRASH (SIGSEGV)" : sig == SIGABRT ? "CRASH (SIGABRT)" : "CRASH (signal)");
  _exit(70);
}

struct Options {
  long long iterations = 2000;
  double seconds = 0;   // 0: iterations only
  unsigned long long seed = 1;
  long long per_input_ms = 2000;
  int cache_every = 20;   // one damaged cache file per this many iterations (they cost file I/O)
};

struct Tally {
  long long inputs = 0, accepted = 0, failures = 0;
  std::map<std::string, long long> rejected;   // "<target>: <kind>" -> count
  void fail(const std::string& target, const std::string& why, const std::string& input) {
    ++failures;
    if (failures <= 20) std::fprintf(stderr, "qattn_fuzz: FAILED %s: %s\n  input: %.300s\n", target.c_str(), why.c_str(), input.c_str());
  }
};

const char* kind_name(ErrorKind k) {
  return k == ErrorKind::bad_input ? "bad_input" : k == ErrorKind::no_gpu ? "no_gpu" : "failure";
}

// Runs one parser over one input; a rejection must be bad_input.
template <class F>
void check_text(Tally& tally, const char* target, const std::string& input, F&& body) {
  set_current(target, input);
  g_started_ms = now_ms();
  ++tally.inputs;
  try {
    std::string why = body();
    if (why.empty()) ++tally.accepted;
    else tally.fail(target, why, input);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::bad_input) tally.fail(target, std::string("rejected as ") + kind_name(e.kind()) + ": " + e.what(), input);
    else ++tally.rejected[std::string(target) + ": bad_input"];
  } catch (const std::exception& e) {
    tally.fail(target, std::string("rejected with ") + typeid(e).name() + " instead of qattn::Error: " + e.what(), input);
  }
  g_started_ms = 0;
}

// Mutations that reach the parsers' corners: bytes, grammar tokens, huge numbers, deep nesting.
const std::vector<std::string> kTokens = {
    " ", "=", ",", ":", "_", "__", "x", "-", "+", "0", "1", "-1", "64", "128", "4294967296", "99999999999999999999",
    "1e400", "nan", "inf", "\"", "\\", "[", "]", "{", "}", "null", "true", "\t", "\n", std::string(1, '\0'),
    "\xff", "\xc3\xa9", "prefill", "decode", "qk=", "pv=", "out=", "d=", "gqa=", "causal", "int8", "int4", "fp8e4m3",
    "fp16", "bf16", "per_token", "per_block", "arch=", "sm_90a", "tq", "tkv", "w", "s", "b=", "hq=", "hkv=", "q=", "kv=",
    "qattn_", "\"version\"", "\"entries\"", "\"specs\"", "\"problems\"", std::string(300, '['), std::string(100000, '['),
    std::string(5000, 'a')};

std::string mutate(std::mt19937_64& rng, const std::string& seed_text, const std::vector<std::string>& corpus) {
  std::string s = seed_text;
  // Mostly one small change, so that many inputs stay near the grammar and reach the deeper checks.
  const int steps = rng() % 8 == 0 ? 0 : 1 + (rng() % 4 == 0 ? static_cast<int>(rng() % 4) : 0);
  for (int i = 0; i < steps; ++i) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 8) {
      case 0: if (!s.empty()) s[rng() % s.size()] ^= static_cast<char>(1u << (rng() % 8)); break;
      case 1: s.insert(pos, 1, static_cast<char>(rng() % 256)); break;
      case 2: if (!s.empty()) s.erase(rng() % s.size(), 1 + rng() % 8); break;
      case 3: s.insert(pos, kTokens[rng() % kTokens.size()]); break;
      case 4: if (!s.empty()) s.resize(rng() % s.size()); break;
      case 5: {   // splice: our head, another seed's tail
        const std::string& o = corpus[rng() % corpus.size()];
        s = s.substr(0, pos) + o.substr(o.empty() ? 0 : rng() % o.size());
        break;
      }
      case 6: if (!s.empty()) { const size_t a = rng() % s.size(); s.insert(pos, s.substr(a, 1 + rng() % 16)); } break;
      default: {   // wholly random bytes
        s.assign(rng() % 64, '\0');
        for (char& c : s) c = static_cast<char>(rng() % 256);
      }
    }
  }
  if (s.size() > 200000) s.resize(200000);
  return s;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A small valid cache: one binary, one tuned row, one decision.
std::string make_cache(const std::string& dir) {
  const std::string path = dir + "/seed.db";
  cache::Store store(path);
  cache::BinaryRecord b;
  b.kernel_name = "qattn_sm90_fwd_qf16_kf16_vf16_of16_d128__tq128_tkv64_w4_s2";
  b.arch = "sm_90";
  b.options = "-arch=sm_90";
  b.toolchain = "nvrtc=13.0;qattn=fuzz";
  b.key = cache::binary_key("// fuzz", {"-arch=sm_90"}, b.arch, b.toolchain);
  b.image.assign(2048, 0x5a);
  store.put_binary(b);
  cache::TunedRecord t;
  t.spec = "prefill qk=fp16 pv=fp16 out=fp16 d=128";
  t.bucket = "b1_q4096_kv4096";
  t.device = cache::DeviceKey{"NVIDIA H100 80GB HBM3", 9, 0, 132, 13000};
  t.toolchain = b.toolchain;
  t.kernel_name = b.kernel_name;
  t.binary_key = b.key;
  t.time_us = 12.5;
  t.candidates_json = "[]";
  store.put_tuned(t);
  cache::DecisionRecord d;
  d.kind = "quant_format";
  d.key = "layer0";
  d.device = t.device;
  d.toolchain = b.toolchain;
  d.json = "{\"version\": 1}";
  store.put_decision(d);
  return path;
}

void check_cache(Tally& tally, std::mt19937_64& rng, const std::string& seed_bytes, const std::string& dir) {
  std::string bytes = seed_bytes;
  const int flips = 1 + static_cast<int>(rng() % 16);
  for (int i = 0; i < flips && !bytes.empty(); ++i) bytes[rng() % bytes.size()] = static_cast<char>(rng() % 256);
  if (rng() % 4 == 0) bytes.resize(rng() % (bytes.size() + 1));
  const std::string path = dir + "/damaged.db", out = dir + "/export.json";
  fs::remove(path);
  fs::remove(out);
  write_file(path, bytes);
  set_current("cache file", "(a damaged copy of the seed cache; seed and iteration reproduce it)");
  g_started_ms = now_ms();
  ++tally.inputs;
  bool rejected = false;
  const auto count = [&](const char* step, const std::exception& e) {
    rejected = true;
    ++tally.rejected[std::string("cache ") + step + ": " + (dynamic_cast<const cache::CacheError*>(&e) ? "CacheError"
                                                           : dynamic_cast<const std::invalid_argument*>(&e) ? "invalid_argument"
                                                                                                           : "runtime_error")];
  };
  try {
    if (!cache::verify_file(path).empty()) ++tally.rejected["cache verify: problems listed"];
  } catch (const std::exception& e) { count("verify", e); }
  try {
    cache::Store store(path, cache::StoreOptions{true, 1000});
    (void)store.list_tuned();
    (void)store.list_decisions();
    (void)store.stats();
    (void)store.get_binary(cache::binary_key("// fuzz", {"-arch=sm_90"}, "sm_90", "nvrtc=13.0;qattn=fuzz"));
  } catch (const std::exception& e) { count("read", e); }
  try { (void)cache::export_json(path, out); } catch (const std::exception& e) { count("export", e); }
  try {
    cache::Store store(path);   // writable: a damaged file is set aside, a good one accepts a write
    cache::DecisionRecord d{"fuzz", "k", cache::DeviceKey{"x", 9, 0, 1, 1}, "t", "{}", 0};
    store.put_decision(d);
  } catch (const std::exception& e) { count("write", e); }
  if (!rejected) ++tally.accepted;
  g_started_ms = 0;
  for (const auto& entry : fs::directory_iterator(dir))   // set-aside copies of damaged files
    if (entry.path().filename().string().find("corrupt") != std::string::npos) fs::remove(entry.path());
}

int usage(const char* msg) {
  std::fprintf(stderr, "qattn_fuzz: %s\nusage: qattn_fuzz [--iterations N] [--seconds S] [--seed N] [--per-input-ms M] [--cache-every K]\n", msg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage(("option " + a + " needs a value (or is unknown)").c_str());
    const std::string v = argv[++i];
    try {
      if (a == "--iterations") opt.iterations = std::stoll(v);
      else if (a == "--seconds") opt.seconds = std::stod(v);
      else if (a == "--seed") opt.seed = std::stoull(v);
      else if (a == "--per-input-ms") opt.per_input_ms = std::stoll(v);
      else if (a == "--cache-every") opt.cache_every = std::stoi(v);
      else return usage(("unknown option " + a).c_str());
    } catch (const std::exception&) {
      return usage(("option " + a + ": '" + v + "' is not a number").c_str());
    }
  }
  if (opt.iterations < 0 || opt.per_input_ms < 1 || opt.cache_every < 0) return usage("negative or zero value");
  std::signal(SIGSEGV, on_signal);
  std::signal(SIGABRT, on_signal);
  std::signal(SIGFPE, on_signal);
  std::signal(SIGBUS, on_signal);

  std::thread([&] {   // the hang watchdog
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const long long s = g_started_ms.load();
      if (s != 0 && now_ms() - s > opt.per_input_ms) {
        report_input("HANG (over --per-input-ms)");
        _exit(71);
      }
    }
  }).detach();

  // Seeds: every default-grid point of every architecture, as text.
  std::vector<std::string> specs, tilings, names, problems, grids;
  for (Arch arch : {Arch::sm_80, Arch::sm_89, Arch::sm_90a})
    for (const Spec& s : gen::default_grid(arch)) {
      const Tiling t = default_tiling(s, default_limits(arch));
      specs.push_back(to_string(s));
      tilings.push_back(to_string(t));
      names.push_back(kernel_name(s, t));
    }
  // Linear layers: every weight format and dataflow (their names and tilings too).
  for (const char* w : {"fp16", "int8:per_channel", "int4:per_group"})
    for (const char* flow : {"gemv", "flat", "gemm"}) {
      const Spec s = parse_spec(std::string("linear a=fp16 w=") + w + " out=bf16 n=14336 k=4096 bias flow=" + flow + " arch=sm_90a");
      const Tiling t = default_tiling(s, default_limits(s.arch));
      specs.push_back(to_string(s));
      tilings.push_back(to_string(t));
      names.push_back(kernel_name(s, t));
    }
  specs.push_back("linear a=bf16 w=int4:per_group out=bf16 n=6144 k=4096");
  // The prefill forms no default tiling takes (warp-specialized, persistent, explicit blocks per SM).
  const Spec hopper = parse_spec("prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal arch=sm_90a");
  for (const char* t : {"bm128_bn128_w8_s3_wg_tma_ws", "bm64_bn128_w4_s2_wg_tma_ws_ps", "bm64_bn128_w4_s3_wg_qf_tma_mb4"}) {
    tilings.push_back(t);
    names.push_back(kernel_name(hopper, parse_tiling(t)));
  }
  for (const Problem& p : {Problem{}, Problem{1, 32, 32, 1, 8192}, Problem{4, 64, 8, 4096, 32768}})
    problems.push_back(to_string(p));
  grids.push_back(R"({"version": 1, "entries": [{"specs": ["prefill qk=int8:per_token pv=int8:per_channel out=bf16 d=128 causal gqa=4 smooth=kv"],
                    "problems": {"q_len": [1024, 4096], "batch": [1]}}]})");
  grids.push_back(R"({"version": 1, "description": "x", "entries": [{"specs": ["prefill qk=bf16 pv=bf16 out=bf16 d=128 causal gqa=4"],
                    "problems": {"q_len": [512]}}]})");
  grids.push_back(R"({"version": 1, "entries": [{"kind": "linear", "specs": ["linear a=bf16 w=int8:per_channel out=bf16 n=4096 k=14336"],
                    "problems": {"m": [1, 8, 64, 8192]}}]})");
  // The unmutated seeds must pass, or the mutants would only test the first error path.
  for (const std::string& g : grids) (void)parse_pretune_grid(g, "seed grid");
  for (const std::string& t : problems) (void)parse_problem(t);

  const std::string dir = (fs::temp_directory_path() / ("qattn_fuzz_" + std::to_string(getpid()))).string();
  fs::create_directories(dir);
  const std::string cache_seed = read_file(make_cache(dir));

  std::mt19937_64 rng(opt.seed);
  Tally tally;
  const auto t0 = std::chrono::steady_clock::now();
  long long it = 0;
  for (; it < opt.iterations || (opt.seconds > 0 && opt.iterations == 0); ++it) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (opt.seconds > 0 && elapsed >= opt.seconds) break;
    const std::string spec_text = mutate(rng, specs[rng() % specs.size()], specs);
    check_text(tally, "spec", spec_text, [&]() -> std::string {
      const Spec s = parse_spec(spec_text);
      (void)validate(s);
      for (const Problem& p : {Problem{}, Problem{2, 8, 1, 7, 300}}) (void)validate(s, p);
      return parse_spec(to_string(s)) == s ? "" : "parse(to_string(spec)) differs: " + to_string(s);
    });
    const std::string problem_text = mutate(rng, problems[rng() % problems.size()], problems);
    check_text(tally, "problem", problem_text, [&]() -> std::string {
      const Problem p = parse_problem(problem_text);
      (void)validate(parse_spec(specs[rng() % specs.size()]), p);
      return parse_problem(to_string(p)) == p ? "" : "parse(to_string(problem)) differs: " + to_string(p);
    });
    const std::string tiling_text = mutate(rng, tilings[rng() % tilings.size()], tilings);
    check_text(tally, "tiling", tiling_text, [&]() -> std::string {
      const Tiling t = parse_tiling(tiling_text);
      const Spec s = parse_spec(specs[rng() % specs.size()]);
      (void)validate(s, t, default_limits(s.arch));
      return parse_tiling(to_string(t)) == t ? "" : "parse(to_string(tiling)) differs: " + to_string(t);
    });
    const std::string name_text = mutate(rng, names[rng() % names.size()], names);
    check_text(tally, "kernel name", name_text, [&]() -> std::string {
      const ParsedKernelName n = parse_kernel_name(name_text);
      if (n.family != KernelFamily::attention) return helper_kernel_name(n.helper) == name_text ? "" : "helper name differs on the way back";
      const std::string back = kernel_name(n.spec, n.tiling);
      const ParsedKernelName again = parse_kernel_name(back);
      return again.spec == n.spec && again.tiling == n.tiling ? "" : "parse(kernel_name(parsed)) differs: " + back;
    });
    const std::string grid_text = mutate(rng, grids[rng() % grids.size()], grids);
    check_text(tally, "grid", grid_text, [&]() -> std::string {
      (void)parse_pretune_grid(grid_text, "fuzz.json");
      return "";
    });
    if (opt.cache_every > 0 && it % opt.cache_every == 0) check_cache(tally, rng, cache_seed, dir);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fs::remove_all(dir);

  std::printf("qattn_fuzz: seed %llu, %lld iterations, %lld inputs in %.1f s: %lld accepted, %lld failed checks, 0 crashes, 0 hangs\n",
              opt.seed, it, tally.inputs, seconds, tally.accepted, tally.failures);
  for (const auto& [k, n] : tally.rejected) std::printf("  rejected  %-28s %lld\n", k.c_str(), n);
  return tally.failures == 0 ? 0 : 1;
}

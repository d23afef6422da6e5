#include "bench/cold_compile.hpp"

#include <sys/resource.h>

#include <chrono>
#include <fstream>

#include "qattn/error.hpp"

namespace qattn::bench {
namespace {

struct CpuTimes {
  double user_ms, sys_ms;
};

CpuTimes process_cpu() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto ms = [](const timeval& t) { return 1e3 * static_cast<double>(t.tv_sec) + 1e-3 * static_cast<double>(t.tv_usec); };
  return {ms(u.ru_utime), ms(u.ru_stime)};
}

}  // namespace

ColdCompileSample cold_compile(const Spec& spec, const Tiling& tiling) {
  RuntimeOptions no_cache;
  no_cache.use_cache = false;   // no binary cache to be served from: the compile below is NVRTC's
  Runtime runtime(no_cache);
  const long long before = runtime.counters().compiles;
  const CpuTimes cpu0 = process_cpu();
  const auto t0 = std::chrono::steady_clock::now();
  const CompiledKernel k = runtime.compile(spec, tiling);
  const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const CpuTimes cpu1 = process_cpu();
  ColdCompileSample s;
  s.kernel_name = k.kernel_name;
  s.wall_ms = wall;
  s.user_ms = cpu1.user_ms - cpu0.user_ms;
  s.sys_ms = cpu1.sys_ms - cpu0.sys_ms;
  s.compiles = runtime.counters().compiles - before;
  s.ptxas_ran = !k.from_cache && k.log.find("Compiling entry function") != std::string::npos;
  s.registers = k.registers;
  s.spill_bytes = k.spill_bytes;
  s.cubin_bytes = k.cubin.size();
  return s;
}

std::vector<ColdCompileSample> cold_compile_phase(const std::vector<Variant>& variants) {
  std::vector<ColdCompileSample> out;
  out.reserve(variants.size());
  for (const Variant& v : variants) out.push_back(cold_compile(v.first, v.second));
  return out;
}

std::string cold_phase_problem(const std::vector<ColdCompileSample>& samples) {
  for (const ColdCompileSample& s : samples) {
    if (s.compiles != 1)
      return s.kernel_name + ": the compile counter moved by " + std::to_string(s.compiles) + ", not 1";
    if (!s.ptxas_ran) return s.kernel_name + ": no ptxas report in the log (served from a cache, not compiled)";
  }
  return {};
}

std::vector<Variant> cold_compile_variants(const std::string& specs_file, Arch arch) {
  std::ifstream in(specs_file);
  if (!in) throw_bad_input("cannot read the spec list " + specs_file);
  std::vector<Variant> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Spec s = parse_spec(line);
    s.arch = arch;
    require(validate(s));
    out.emplace_back(s, default_tiling(s, default_limits(arch)));
  }
  if (out.empty()) throw_bad_input(specs_file + " names no spec (one per line; # starts a comment)");
  return out;
}

}  // namespace qattn::bench

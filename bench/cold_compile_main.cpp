// qattn_bench_cold_compile: what a cold compile costs, per variant, with no GPU.
//
//   qattn_bench_cold_compile --specs bench/cold_compile_specs.txt [--arch sm_90a] [--out result.json]
//
// Each spec of the list (default tiling) is rendered and compiled once (NVRTC front end, NVVM,
// ptxas) in a fresh runtime with no cache file. Prints one row per variant (wall time, this process's
// user and system CPU time, registers, spills, cubin size) and the medians. Exit 1 when a variant was
// not really compiled (the compile counter did not move by one, or no ptxas report): a number served by
// a cache would not be a cold compile.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/cold_compile.hpp"
#include "qattn/error.hpp"
#include "qattn/tuner.hpp"

namespace {

int run(const std::string& specs, qattn::Arch arch, const std::string& out_path) {
  const auto variants = qattn::bench::cold_compile_variants(specs, arch);
  std::printf("%-88s %9s %9s %8s %5s %6s %8s\n", "kernel", "wall_ms", "user_ms", "sys_ms", "regs", "spills", "cubin");
  std::vector<qattn::bench::ColdCompileSample> samples;
  for (const auto& v : variants) {
    samples.push_back(qattn::bench::cold_compile(v.first, v.second));
    const auto& s = samples.back();
    std::printf("%-88s %9.1f %9.1f %8.1f %5d %6d %8zu\n", s.kernel_name.c_str(), s.wall_ms, s.user_ms, s.sys_ms,
                s.registers, s.spill_bytes, s.cubin_bytes);
    std::fflush(stdout);
  }
  std::vector<double> wall, user, cpu;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& s : samples) {
    wall.push_back(s.wall_ms);
    user.push_back(s.user_ms);
    cpu.push_back(s.user_ms + s.sys_ms);
    rows.push_back({{"kernel", s.kernel_name}, {"wall_ms", s.wall_ms}, {"user_ms", s.user_ms}, {"sys_ms", s.sys_ms},
                    {"registers", s.registers}, {"spill_bytes", s.spill_bytes}, {"cubin_bytes", s.cubin_bytes}});
  }
  const double mw = qattn::median(wall), mu = qattn::median(user), mc = qattn::median(cpu);
  std::printf("median over %zu variants: wall %.1f ms, user %.1f ms, user+sys %.1f ms\n", samples.size(), mw, mu, mc);
  if (!out_path.empty()) {
    nlohmann::json out = {{"version", qattn::version_string()}, {"arch", qattn::to_string(arch)}, {"variants", rows},
                          {"median_wall_ms", mw}, {"median_user_ms", mu}, {"median_cpu_ms", mc}};
    std::ofstream(out_path) << out.dump(2) << "\n";
  }
  if (const std::string problem = qattn::bench::cold_phase_problem(samples); !problem.empty()) {
    std::fprintf(stderr, "qattn_bench_cold_compile: %s\n", problem.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string specs, arch = "sm_90a", out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--specs" && has_value) specs = argv[++i];
    else if (a == "--arch" && has_value) arch = argv[++i];
    else if (a == "--out" && has_value) out = argv[++i];
    else {
      std::fprintf(stderr, "qattn_bench_cold_compile: unknown argument '%s'; accepted: --specs F --arch A --out F\n", a.c_str());
      return 2;
    }
  }
  if (specs.empty()) {
    std::fprintf(stderr, "qattn_bench_cold_compile: --specs F (e.g. bench/cold_compile_specs.txt) is required\n");
    return 2;
  }
  try {
    return run(specs, qattn::parse_arch(arch), out);
  } catch (const qattn::Error& e) {
    std::fprintf(stderr, "qattn_bench_cold_compile: %s\n", e.what());
    return static_cast<int>(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qattn_bench_cold_compile: %s\n", e.what());
    return 1;
  }
}

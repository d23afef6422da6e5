// qattn_bench_startup: how fast an application gets launchable kernels (issue 5, "start-up").
//
//   qattn_bench_startup --db TUNED.db [--kernels 50] [--compiles 5] [--out result.json]
//
// TUNED.db is a tuned cache (e.g. from `qattn pretune`), opened as the application-shipped, read-only
// layer. Measured, in this order:
//   context         the process's first CUDA context (driver load, cuInit, primary context): paid by any
//                   CUDA program, reported apart from the cache's costs
//   cold compile    render + NVRTC + ptxas of one variant (the first --compiles tuned winners, no cache:
//                   neither qattn's nor NVRTC's own; each must move the compile counter by one and
//                   leave a ptxas report, or the program exits 1)
//   sqlite hit      first request of a kernel in a process whose runtime is open: tuned winner + cubin
//                   read from SQLite (digest checked), module loaded; no NVRTC, no tuning
//   in-process hit  a repeated request (the runtime's map)
//   N ready         a new runtime over the shipped cache, then N kernels requested: wall time to all
//                   N launchable (runtime construction and the SQLite open included)
// Every kernel counted is a distinct binary: tuned rows whose winner another row already named are
// skipped (a second request for it would be an in-process hit, not a cache load).
// The counters must show 0 compiles and 0 tunings for the cache phases; the program exits 1 otherwise.
// Targets (not asserted; compared in the printed summary): cold compile <= 1 s median, sqlite hit
// <= 5 ms, in-process hit <= 2 us, 50 kernels <= 250 ms.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/cold_compile.hpp"
#include "cache/store.hpp"
#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/runtime.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/jit/toolchain.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct Entry {
  qattn::Spec spec;
  qattn::Tiling tiling;
  qattn::Problem problem;
};

// A problem of the tuned row's bucket: 32 query heads (fewer when the bucket holds fewer), GQA as in the spec.
qattn::Problem problem_of(const qattn::Spec& spec, const std::string& bucket) {
  long long q = 0, kv = 0, bh = 0;
  if (std::sscanf(bucket.c_str(), "q%lld_kv%lld_bh%lld", &q, &kv, &bh) != 3) qattn::throw_bad_input("bad bucket " + bucket);
  qattn::Problem like;
  like.heads_q = static_cast<int>(std::min<long long>(bh, 32));
  if (like.heads_q % spec.gqa) like.heads_q = spec.gqa;
  like.heads_kv = like.heads_q / spec.gqa;
  return qattn::bucket_representative(bucket, like);
}

std::vector<Entry> tuned_entries(const std::string& db, const qattn::cache::DeviceKey& device) {
  qattn::cache::Store::Options o;
  o.read_only = true;
  qattn::cache::Store store(db, o);
  std::vector<Entry> out;
  std::set<std::string> names;
  for (const auto& r : store.list_tuned()) {
    if (r.device != device || r.toolchain != qattn::rt::toolchain_fingerprint()) continue;
    if (!names.insert(r.kernel_name).second) continue;
    const qattn::ParsedKernelName k = qattn::parse_kernel_name(r.kernel_name);
    out.push_back({k.spec, k.tiling, problem_of(k.spec, r.bucket)});
  }
  return out;
}

double median(std::vector<double> v) { return qattn::median(std::move(v)); }

int run(const std::string& db, int kernels, int compiles, const std::string& out_path) {
  nlohmann::json out;
  out["version"] = qattn::version_string();
  out["db"] = db;
  // The device key, from a runtime that does not touch the cache (no_gpu here without a GPU: exit 3).
  qattn::RuntimeOptions probe_options;
  probe_options.use_cache = false;
  qattn::Runtime probe(probe_options);
  (void)probe.resolve(qattn::parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=128"));
  // 0. The primary CUDA context (what any CUDA program pays once), before anything else creates it.
  {
    const auto t0 = Clock::now();
    qattn::rt::DeviceBuffer first(256, 0);
    out["context_ms"] = ms_since(t0);
  }
  const qattn::rt::DeviceInfo info = qattn::rt::query_device(0);
  const qattn::cache::DeviceKey device{info.name, info.cc_major, info.cc_minor, info.sm_count, info.driver_version};
  const std::vector<Entry> all = tuned_entries(db, device);
  if (all.empty()) qattn::throw_bad_input(db + " holds no tuned winner for this device and toolchain; pretune it first");
  out["device"] = device.str();
  out["distinct_tuned_kernels"] = all.size();

  // 1. Cold compile: no cache at all, each variant rendered and compiled once (bench/cold_compile.hpp).
  std::vector<qattn::bench::Variant> cold;
  for (int i = 0; i < compiles && i < static_cast<int>(all.size()); ++i)
    cold.emplace_back(all[static_cast<size_t>(i)].spec, all[static_cast<size_t>(i)].tiling);
  const std::vector<qattn::bench::ColdCompileSample> cold_samples = qattn::bench::cold_compile_phase(cold);
  std::vector<double> compile_ms, compile_cpu_ms;
  for (const auto& s : cold_samples) {
    compile_ms.push_back(s.wall_ms);
    compile_cpu_ms.push_back(s.user_ms + s.sys_ms);
  }
  out["cold_compile_ms"] = compile_ms;
  out["cold_compile_cpu_ms"] = compile_cpu_ms;
  if (const std::string problem = qattn::bench::cold_phase_problem(cold_samples); !problem.empty()) {
    std::fprintf(stderr, "qattn_bench_startup: the cold phase was not a cold compile: %s\n", problem.c_str());
    return 1;
  }

  // 2 and 3. One runtime over the shipped cache; each kernel's first request, then repeated requests.
  const int n = std::min<int>(kernels, static_cast<int>(all.size()));
  qattn::RuntimeOptions shipped;
  shipped.cache_path = db;
  shipped.read_only = true;
  std::vector<double> hit_ms, in_process_us;
  {
    qattn::Runtime rt(shipped);
    for (int i = 0; i < n; ++i) {
      const Entry& e = all[static_cast<size_t>(i)];
      const auto t0 = Clock::now();
      rt.kernel(e.spec, e.problem);
      hit_ms.push_back(ms_since(t0));
      constexpr int kRepeats = 20000;
      const auto t1 = Clock::now();
      for (int r = 0; r < kRepeats; ++r) rt.kernel(e.spec, e.problem);
      in_process_us.push_back(1000.0 * ms_since(t1) / kRepeats);
    }
    const qattn::RuntimeCounters c = rt.counters();
    out["hit_counters"] = {{"compiles", c.compiles}, {"tunings", c.tunings}, {"tuned_db_hits", c.tuned_db_hits},
                           {"binary_db_hits", c.binary_db_hits}, {"loads", c.loads}};
    if (c.compiles || c.tunings) {
      std::fprintf(stderr, "qattn_bench_startup: the shipped cache did not serve every kernel (%lld compiles, %lld tunings)\n",
                   c.compiles, c.tunings);
      return 1;
    }
  }
  out["sqlite_hit_ms"] = hit_ms;
  out["in_process_hit_us"] = in_process_us;

  // 4. A fresh runtime, N kernels: the application's start-up.
  const auto t0 = Clock::now();
  qattn::Runtime rt(shipped);
  for (int i = 0; i < n; ++i) rt.kernel(all[static_cast<size_t>(i)].spec, all[static_cast<size_t>(i)].problem);
  const double ready_ms = ms_since(t0);
  out["kernels"] = n;
  out["n_ready_ms"] = ready_ms;
  const qattn::RuntimeCounters c = rt.counters();
  if (c.compiles || c.tunings) return 1;

  const double cc = compile_ms.empty() ? NAN : median(compile_ms), hit = median(hit_ms), mem = median(in_process_us);
  out["summary"] = {{"cold_compile_median_ms", cc}, {"sqlite_hit_median_ms", hit}, {"in_process_hit_median_us", mem},
                    {"n_ready_ms", ready_ms}};
  std::printf("device          %s\n", device.str().c_str());
  std::printf("CUDA context    %8.1f ms (primary context creation; not a cache cost)\n", out["context_ms"].get<double>());
  std::printf("cold compile    median %8.1f ms over %zu variants   (target <= 1000 ms) %s\n", cc, compile_ms.size(),
              cc <= 1000 ? "met" : "MISSED");
  std::printf("sqlite hit      median %8.3f ms over %d kernels    (target <= 5 ms)    %s\n", hit, n, hit <= 5 ? "met" : "MISSED");
  std::printf("in-process hit  median %8.3f us                    (target <= 2 us)    %s\n", mem, mem <= 2 ? "met" : "MISSED");
  std::printf("%d kernels ready       %8.1f ms                    (target <= 250 ms for 50) %s\n", n, ready_ms,
              n >= 50 && ready_ms <= 250 ? "met" : n < 50 ? "n/a (fewer than 50 tuned entries)" : "MISSED");
  if (!out_path.empty()) std::ofstream(out_path) << out.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string db, out;
  int kernels = 50, compiles = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--db" && has_value) db = argv[++i];
    else if (a == "--out" && has_value) out = argv[++i];
    else if (a == "--kernels" && has_value) kernels = std::atoi(argv[++i]);
    else if (a == "--compiles" && has_value) compiles = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "qattn_bench_startup: unknown argument '%s'; accepted: --db F --kernels N --compiles N --out F\n", a.c_str());
      return 2;
    }
  }
  if (db.empty() || kernels < 1 || compiles < 0) {
    std::fprintf(stderr, "qattn_bench_startup: --db F (a tuned cache) is required; --kernels >= 1, --compiles >= 0\n");
    return 2;
  }
  try {
    return run(db, kernels, compiles, out);
  } catch (const qattn::Error& e) {
    std::fprintf(stderr, "qattn_bench_startup: %s\n", e.what());
    return static_cast<int>(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qattn_bench_startup: %s\n", e.what());
    return 1;
  }
}

// The main job: the attention kernels of a Llama-3-8B-like layer (32 query heads over 8 KV heads,
// d = 128, causal), requested by spec. With a GPU: tuned (or taken from the cache), run, timed and
// checked against a float64 reference, as a table. Without one: compiled into the cache for sm_80,
// sm_89 and sm_90a, so a later run (or a shipped cache) starts without compiling.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "qattn/search_space.hpp"
#include "runtime/driver.hpp"

namespace {

const char* kSpecs[] = {
    "prefill qk=fp16 pv=fp16 out=fp16 d=128 causal gqa=4",
    "prefill qk=bf16 pv=bf16 out=bf16 d=128 causal gqa=4",
    "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=kv",
    "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=k",
    "prefill qk=int8:per_block pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=kv",
    "prefill qk=int8:per_tensor pv=int8:per_tensor out=fp16 d=128 causal gqa=4 smooth=k",
};

int compile_only(qattn::Runtime& runtime, const std::string& why) {
  std::printf("no GPU (%s)\ncompile-only: rendering and compiling every kernel of the layer into %s\n\n", why.c_str(),
              runtime.cache_path().c_str());
  std::printf("%-88s %5s %6s %9s\n", "kernel", "regs", "spills", "compile");
  int n = 0;
  for (qattn::Arch arch : {qattn::Arch::sm_80, qattn::Arch::sm_89, qattn::Arch::sm_90a})
    for (const char* text : kSpecs) {
      qattn::Spec spec = qattn::parse_spec(text);
      spec.arch = arch;
      const qattn::CompiledKernel k = runtime.compile(spec, qattn::default_tiling(spec, qattn::default_limits(arch)));
      std::printf("%-88s %5d %6d %7.0fms%s\n", k.kernel_name.c_str(), k.registers, k.spill_bytes, k.compile_ms,
                  k.from_cache ? " (cached)" : "");
      n += 1 + static_cast<int>(runtime.compile_helpers(spec).size());   // quantization passes and LSE fix
    }
  std::printf("\n%d kernel binaries (attention kernels and their quantization/LSE helpers) are in the cache;\n"
              "run this again on a GPU to tune and time them\n", n);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);   // one table row at a time, also into a pipe or a file
  try {
    const qattn::Problem problem = qattn::parse_problem(argc > 1 ? argv[1] : "b=1,hq=32,hkv=8,q=4096,kv=4096");
    qattn::Runtime runtime;
    std::printf("%s\nlayer: Llama-3-8B-like attention, %s, d=128, causal\n", qattn::version_string().c_str(),
                qattn::to_string(problem).c_str());
    std::string why;
    if (!qattn::rt::driver_available(&why)) return compile_only(runtime, why);
    std::printf("\n%-80s %-22s %9s %7s %9s %9s %9s %s\n", "spec", "tiling", "time_us", "TOPS", "cosine", "rel_l2",
                "max_abs", "ok");
    std::random_device rd;
    int failed = 0;
    for (const char* text : kSpecs) {
      const qattn::Spec spec = runtime.resolve(qattn::parse_spec(text));
      const qattn::Kernel& k = runtime.kernel(spec, problem);
      const auto acc = runtime.check(spec, problem, (static_cast<unsigned long long>(rd()) << 32) ^ rd());
      const double us = qattn::median(runtime.benchmark(spec, problem));
      const double tops = qattn::attention_flops(problem, spec.head_dim, spec.causal) / us / 1e6;
      std::printf("%-80s %-22s %9.1f %7.1f %9.6f %9.2e %9.2e %s\n", text, qattn::to_string(k.tiling()).c_str(), us, tops,
                  acc.cosine, acc.rel_l2, acc.max_abs, acc.passed ? "PASS" : "FAIL");
      failed += !acc.passed;
    }
    const qattn::RuntimeCounters c = runtime.counters();
    std::printf("\ncounters: %lld tunings, %lld compiles, %lld cubins from cache, %lld tuned winners from cache\n",
                c.tunings, c.compiles, c.binary_db_hits, c.tuned_db_hits);
    std::printf("cache: %s\n", runtime.cache_path().c_str());
    return failed ? 1 : 0;
  } catch (const qattn::Error& e) {
    std::fprintf(stderr, "qattn: %s\n", e.what());
    return static_cast<int>(e.kind());
  }
}

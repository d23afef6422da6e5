// Compile kernels into the cache on a machine without a GPU (e.g. a build server), to ship the cache.
#include <cstdio>

#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "qattn/validate.hpp"

int main(int argc, char** argv) {
  try {
    qattn::RuntimeOptions options;
    if (argc > 1) options.cache_path = argv[1];
    qattn::Runtime runtime(options);
    for (const char* text : {"prefill qk=fp16 pv=fp16 out=fp16 d=128 causal arch=sm_90a",
                             "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal smooth=k arch=sm_90a"}) {
      const qattn::Spec spec = qattn::parse_spec(text);
      const qattn::CompiledKernel k = runtime.compile(spec, qattn::default_tiling(spec, qattn::default_limits(spec.arch)));
      std::printf("%s: %zu bytes, %d registers%s\n", k.kernel_name.c_str(), k.cubin.size(), k.registers,
                  k.from_cache ? " (cached)" : "");
    }
    std::printf("cache: %s\n", runtime.cache_path().c_str());
    return 0;
  } catch (const qattn::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return static_cast<int>(e.kind());
  }
}

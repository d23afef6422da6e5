// Request a quantized attention kernel by spec and run it on FP16 device tensors.
// Usage: qattn_example_01_request_by_spec   (needs a GPU; exits 3 without one)
#include <cstdio>
#include <vector>

#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/runtime.hpp"

int main() {
  try {
    qattn::Runtime runtime;   // cache in $QATTN_CACHE_DIR or ~/.cache/qattn
    const qattn::Spec spec =
        qattn::parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=k");
    const qattn::Problem problem = qattn::parse_problem("b=1,hq=32,hkv=8,q=2048,kv=2048");
    // The first request tunes (or loads the cached winner); later ones are an in-process lookup.
    const qattn::Kernel& kernel = runtime.kernel(spec, problem);
    // attention() launches the tuned tiling's fused-Q / TMA twin where there is one (sm_90a, int8 Q).
    const qattn::Spec resolved = runtime.resolve(spec);   // the arch filled in from the device
    std::printf("kernel: %s\n", qattn::kernel_name(resolved, runtime.launch_form(resolved, kernel.tiling())).c_str());
    // Accuracy against a float64 reference on random data with outliers, and kernel-only timing.
    const auto acc = runtime.check(spec, problem, 42);
    const double us = qattn::median(runtime.benchmark(spec, problem));
    std::printf("cosine %.6f  rel L2 %.2e  %.1f us  %.0f TOPS\n", acc.cosine, acc.rel_l2, us,
                qattn::attention_flops(problem, spec.head_dim, spec.causal) / us / 1e6);
    // With your own device tensors (fp16, [b, s, h, d]) it is:
    //   qattn::AttentionCall call{spec, problem, qattn::bshd(q, 2048, 32, 128), qattn::bshd(k, 2048, 8, 128),
    //                             qattn::bshd(v, 2048, 8, 128), qattn::bshd(o, 2048, 32, 128)};
    //   runtime.attention(call, stream);
    return acc.passed ? 0 : 1;
  } catch (const qattn::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return static_cast<int>(e.kind());
  }
}

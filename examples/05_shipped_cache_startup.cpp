// An application's start-up with a tuned cache shipped next to its binary: the shipped file is opened
// read-only under the user's own cache (writes go there), so the first request for each kernel loads the
// stored cubin of the tuned winner: no NVRTC, no tuning. Entries made on another GPU, driver or
// toolchain are never used silently: Runtime::cache_warnings() says why a kernel was re-tuned.
// The kernels requested are the prefill points of the grid the cache was pretuned with (an engine
// knows its model's layers; 04_pretune_device.cpp made the cache from the same grid).
// Usage: qattn_example_05_shipped_cache_startup SHIPPED.db GRID.json|default [USER.db]
//        (needs a GPU; exits 3 without one)
#include <chrono>
#include <cstdio>

#include "qattn/error.hpp"
#include "qattn/pretune.hpp"
#include "qattn/runtime.hpp"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s SHIPPED.db GRID.json|default [USER.db]\n", argv[0]);
    return 2;
  }
  try {
    const std::vector<qattn::PretuneItem> items = qattn::expand_grid(qattn::load_pretune_grid(argv[2]));
    const auto t0 = std::chrono::steady_clock::now();
    qattn::RuntimeOptions o;
    o.shipped_cache_path = argv[1];            // or set QATTN_SHIPPED_CACHE
    if (argc == 4) o.cache_path = argv[3];     // default: $QATTN_CACHE_DIR/qattn.db or ~/.cache/qattn/qattn.db
    qattn::Runtime runtime(o);
    // The model's prefill kernels, as the engine would request them at start-up.
    size_t requested = 0;
    for (const qattn::PretuneItem& item : items)
      if (item.kind == qattn::Phase::prefill) {
        runtime.kernel(item.spec, item.problem);
        ++requested;
      }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const qattn::RuntimeCounters c = runtime.counters();
    std::printf("%zu kernel requests ready in %.1f ms: %lld tuned winners and %lld cubins from the cache, %lld compiles, %lld tunings\n", requested, ms,
                c.tuned_db_hits, c.binary_db_hits, c.compiles, c.tunings);
    for (const std::string& w : runtime.cache_warnings()) std::printf("cache: %s\n", w.c_str());
    return 0;
  } catch (const qattn::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return static_cast<int>(e.kind());
  }
}

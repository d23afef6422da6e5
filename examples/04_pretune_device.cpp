// Pretune this GPU for a model, offline: every prefill (spec, problem bucket) of a grid gets its tuned
// winner, every decode family its dataflow inflection points and split-K table, all stored in one cache
// file that the application can ship (see 05_shipped_cache_startup.cpp). Run it again after an
// interruption: finished items are kept and skipped. `qattn pretune` is the same thing as a command
// (with every visible GPU, a progress bar and --json).
// Usage: qattn_example_04_pretune_device GRID.json|default OUT.db   (needs a GPU; exits 3 without one)
#include <unistd.h>

#include <cstdio>

#include "qattn/error.hpp"
#include "qattn/pretune.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s GRID.json|default OUT.db\n", argv[0]);
    return 2;
  }
  try {
    const std::vector<qattn::PretuneItem> items = qattn::expand_grid(qattn::load_pretune_grid(argv[1]));
    // Opens the cache and the device (no_gpu: exit 3).
    const std::unique_ptr<qattn::PretuneWorker> gpu0 = qattn::make_gpu_pretune_worker(0, argv[2]);
    qattn::TerminalProgress progress(stderr, isatty(fileno(stderr)) != 0);
    const qattn::PretuneSummary s = qattn::run_pretune(items, {gpu0.get()}, {}, progress);
    std::printf("%zu items: %zu tuned now, %zu already in %s, %zu failed, %.0f s\n", s.total, s.ran, s.resumed, argv[2],
                s.failed, s.elapsed_s);
    for (const qattn::ItemOutcome& out : s.outcomes)
      if (out.status == qattn::ItemStatus::failed) std::printf("  failed: %s: %s\n", out.key.c_str(), out.detail.c_str());
    return s.exit_code();
  } catch (const qattn::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return static_cast<int>(e.kind());
  }
}

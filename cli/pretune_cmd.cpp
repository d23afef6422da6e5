// qattn pretune: tune a grid of specs x problem sizes ahead of time on every chosen GPU (one worker
// thread per device), with a progress line; resumable, since each finished item is committed at once.
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "qattn/error.hpp"
#include "qattn/pretune.hpp"
#include "runtime/tuning/pretune_executor.hpp"

namespace qattn::cli {
namespace {

// Ctrl-C once: workers finish their current item (it is stored) and stop. Twice: exit at once; what
// finished is in the cache already, the items in flight are lost.
std::atomic<bool> g_cancel{false};
volatile std::sig_atomic_t g_interrupts = 0;

extern "C" void on_interrupt(int) {
  if (g_interrupts++ == 0) {
    g_cancel.store(true);
    const char msg[] = "\n[pretune] interrupted: finishing the current items (Ctrl-C again to quit now)\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    return;
  }
  std::signal(SIGINT, SIG_DFL);
  std::raise(SIGINT);
}

// Installs on_interrupt for the life of the object, then puts back what was there.
class InterruptGuard {
 public:
  InterruptGuard() {
    g_cancel = false;
    g_interrupts = 0;
    struct sigaction sa = {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &previous_);
  }
  ~InterruptGuard() { sigaction(SIGINT, &previous_, nullptr); }

 private:
  struct sigaction previous_ = {};
};

size_t terminal_width() {
  winsize w = {};
  return ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 20 ? w.ws_col - 1 : 120;
}

std::vector<PretuneItem> items_of_kind(std::vector<PretuneItem> items, const std::string& kind) {
  if (kind != "all" && kind != "prefill" && kind != "decode")
    throw_bad_input("--kind " + kind + " is unknown; accepted: all, prefill, decode");
  if (kind == "all") return items;
  const Phase keep = kind == "decode" ? Phase::decode : Phase::prefill;
  items.erase(std::remove_if(items.begin(), items.end(), [&](const PretuneItem& it) { return it.kind != keep; }),
              items.end());
  return items;
}

void print_summary(const PretuneSummary& s, const std::vector<std::unique_ptr<rt::GpuPretuneWorker>>& workers,
                   const std::string& db) {
  std::printf("pretune: %zu of %zu items finished in %s on %zu device(s): %zu tuned, %zu already stored, %zu failed\n",
              s.ran + s.resumed + s.failed, s.total, format_duration(s.elapsed_s).c_str(), workers.size(), s.ran,
              s.resumed, s.failed);
  for (const auto& w : workers) std::printf("  %s  %s\n", w->device_label().c_str(), w->device_name().c_str());
  std::printf("stored in %s\n", db.c_str());
  if (s.failed) {
    std::printf("failed:\n");
    for (const ItemOutcome& o : s.outcomes)
      if (o.status == ItemStatus::failed)
        std::printf("  %s on %s: %s\n", o.key.c_str(), o.device.c_str(), o.detail.substr(0, 300).c_str());
  }
  if (s.cancelled && s.not_run)
    std::printf("interrupted: %zu items not run; run the same command again to resume\n", s.not_run);
}

}  // namespace

int pretune(int argc, char** argv) {
  const Args args(argc, argv, 2, {"grid", "devices", "db", "jobs", "kind"}, {"json", "dry-run", "print-grid"});
  const std::string grid_name = args.get("grid", "default");
  if (args.has("print-grid")) {   // the built-in grid as a grid document: a starting point for your own
    if (grid_name != "default") throw_bad_input("--print-grid prints the built-in grid; leave out --grid or give --grid default");
    std::printf("%s\n", default_pretune_grid_json().c_str());
    return 0;
  }
  const std::vector<PretuneItem> items =
      items_of_kind(order_for_tuning(expand_grid(load_pretune_grid(grid_name))), args.get("kind", "all"));
  if (args.has("dry-run")) {
    for (const PretuneItem& it : items) std::printf("%s\t%s\n", it.key().c_str(), to_string(it.problem).c_str());
    std::printf("%zu items (per device model)\n", items.size());
    return 0;
  }
  const std::vector<int> devices = rt::select_devices(args.get("devices", "all"));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int jobs = args.get_int("jobs", std::max(1, cores / static_cast<int>(devices.size())), 1, 1024);

  std::vector<std::unique_ptr<rt::GpuPretuneWorker>> workers;
  std::vector<PretuneWorker*> worker_ptrs;
  for (int d : devices) {
    rt::GpuPretuneOptions o;
    o.device = d;
    o.cache_path = args.get("db");
    o.compile_jobs = jobs;
    workers.push_back(std::make_unique<rt::GpuPretuneWorker>(o));
    worker_ptrs.push_back(workers.back().get());
  }
  const std::string db = workers.front()->runtime().cache_path();
  std::fprintf(stderr, "[pretune] %zu items on %zu device(s), %d compile threads each; results go to %s\n",
               items.size(), devices.size(), jobs, db.c_str());

  PretuneSummary summary;
  {
    const InterruptGuard guard;
    TerminalProgress progress(stderr, isatty(STDERR_FILENO) != 0, terminal_width());
    PretuneOptions options;
    options.cancel = &g_cancel;
    summary = run_pretune(items, worker_ptrs, options, progress);
  }
  if (args.has("json")) {
    nlohmann::json j = nlohmann::json::parse(summary_json(summary));
    j["db"] = db;
    for (const auto& w : workers)
      j["devices"].push_back({{"label", w->device_label()}, {"name", w->device_name()}, {"key", w->device_class()}});
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_summary(summary, workers, db);
  }
  return summary.exit_code();
}

}  // namespace qattn::cli

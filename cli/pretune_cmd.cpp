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
#include "cli/verbs.hpp"
#include "qattn/error.hpp"
#include "qattn/linear_inflection.hpp"
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

// What an item times: a prefill / decode item's problem, a linear item's token counts ("m=1,2,4").
std::string item_shape(const PretuneItem& it) {
  if (it.kind != Phase::linear) return to_string(it.problem);
  const std::vector<int> rows = it.rows.empty() ? LinearSweepOptions{}.rows : it.rows;
  std::string m;
  for (int r : rows) m += (m.empty() ? "m=" : ",") + std::to_string(r);
  return m;
}

std::vector<PretuneItem> items_of_kind(std::vector<PretuneItem> items, const std::string& kind) {
  if (kind != "all" && kind != "prefill" && kind != "decode" && kind != "linear")
    throw_bad_input("--kind " + kind + " is unknown; accepted: all, prefill, decode, linear");
  if (kind == "all") return items;
  const Phase keep = kind == "decode" ? Phase::decode : kind == "linear" ? Phase::linear : Phase::prefill;
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

int pretune(const Args& args) {
  const std::string grid_name = args.get("grid", "default");
  if (args.has("print-grid")) {   // the built-in grid as a grid document: a starting point for your own
    if (grid_name != "default") throw_bad_input("--print-grid prints the built-in grid; leave out --grid or give --grid default");
    std::printf("%s\n", default_pretune_grid_json().c_str());
    return 0;
  }
  const std::vector<PretuneItem> items =
      items_of_kind(order_for_tuning(expand_grid(load_pretune_grid(grid_name))), args.get("kind", "all"));
  if (args.has("dry-run") && args.has("json")) {
    nlohmann::json j = {{"items", nlohmann::json::array()}, {"count", items.size()}};
    for (const PretuneItem& it : items) j["items"].push_back({{"key", it.key()}, {"shape", item_shape(it)}});
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  if (args.has("dry-run")) {
    for (const PretuneItem& it : items) std::printf("%s\t%s\n", it.key().c_str(), item_shape(it).c_str());
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

}  // namespace

const Verb& pretune_verb() {
  static const Verb verb{
      "pretune",
      "tune a grid of specs x problem sizes ahead of time on every chosen GPU (resumable)",
      {"pretune [--grid default|FILE] [--kind all|prefill|decode|linear] [--devices all|N,N,...] [--jobs N] [--db FILE] [--json]",
       "pretune [--grid default|FILE] [--kind all|prefill|decode|linear] --dry-run [--json]",
       "pretune --print-grid"},
      "Tunes every item of the grid (each spec at each problem size, and the decode dataflow and split sweeps) "
      "on each chosen GPU, one worker per device, and stores each result in the cache as soon as it finishes: "
      "interrupt it (Ctrl-C finishes the items in flight) and run the same command again to resume. A progress "
      "line goes to stderr, the summary to stdout; exit 1 when an item failed. Needs a GPU (exit 3 without one), "
      "except --dry-run (lists the items) and --print-grid (prints the built-in grid as a grid file, itself JSON, "
      "to start your own from).",
      {{"grid", "G", "default (the built-in grid) or a grid file (JSON; see examples/grids/)"},
       {"kind", "K", "which items: all (default), prefill, decode or linear"},
       {"devices", "D", "all visible GPUs (default) or a comma list of ordinals, e.g. 0,2"},
       {"jobs", "N", "compile threads per device, 1..1024 (default: CPU cores / devices)"},
       db_option(),
       {"dry-run", "", "list the items (key and shape) and their count; nothing is run, no GPU needed"},
       {"print-grid", "", "print the built-in grid as a grid file (JSON) and exit"},
       json_option("the summary (with --dry-run: the items)")},
      {{"qattn pretune --dry-run --kind decode", "list the decode items of the built-in grid, without a GPU"},
       {"qattn pretune --grid examples/grids/llama3_8b.json --devices 0", "tune the Llama 3 8B grid on GPU 0"},
       {"qattn pretune --print-grid > my_grid.json", "start a grid file of your own from the built-in one"}},
      0,
      {},
      pretune};
  return verb;
}

}  // namespace qattn::cli

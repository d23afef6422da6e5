// Offline pretuning (`qattn pretune`): tune every point of a grid of specs x problem sizes ahead of time,
// so that applications never pay the tuning (or compile) cost at their first call.
//
// Three parts, all CPU logic, tested with fake workers:
//   grid      a JSON file (or the built-in default) expanded into work items, one per (spec, bucket);
//   scheduler one thread per worker (a GPU), items shared through per-device-class queues; an item that
//             is already stored is skipped (resume), a failed one is recorded and the run goes on;
//   progress  one status line (points done/total, elapsed, ETA, what each device is on).
// The GPU worker lives in the runtime (runtime/tuning/pretune_executor.hpp).
//
// Grid file (version 1; every integer field takes one integer or a list of them):
//   {"version": 1, "description": "...optional...",
//    "entries": [
//      {"spec": "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=kv",
//       "problems": {"batch": [1], "heads_q": [32], "heads_kv": [8],
//                    "q_len": [1024, 4096, 16384], "kv_len": "same"}},
//      {"kind": "decode", "specs": ["decode qk=int4:per_token pv=int4:per_token out=bf16 d=128 gqa=4"],
//       "problems": {"batch": [1, 16], "heads_q": [32], "q_len": [1], "kv_len": [4096, 65536]}},
//      {"kind": "linear", "specs": ["linear a=fp16 w=int4:per_group out=fp16 n=14336 k=4096"],
//       "problems": {"m": [1, 2, 4, 8, 16, 64, 256, 1024, 8192]}}]}
//   spec | specs  one spec text or a list; no arch= (each device tunes for its own arch)
//   kind          prefill | decode | linear (optional; must match the specs' phase)
//   problems      batch (default 1), heads_q (default 32), heads_kv (default heads_q / gqa of each spec),
//                 q_len (required), kv_len ("same" = q_len, the default; a decode entry needs a list);
//                 every combination of the lists is a problem. A linear entry takes only m (the token
//                 counts of its sweep, 1..8192; problems may be left out: LinearSweepOptions' default)
//   description   free text, ignored (JSON has no comments)
// A prefill (spec, problem) becomes the item (spec, problem_bucket(problem)) timed on the bucket's
// representative problem; problems falling into one bucket are one item. A decode or linear spec becomes
// one item per spec ("<spec>|sweep"): its decisions are swept over all of the entry's problems at once.
#pragma once
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qattn/export.h"
#include "qattn/problem.hpp"
#include "qattn/spec.hpp"

QATTN_PUBLIC_BEGIN
namespace qattn {

// ---- Grid ---------------------------------------------------------------------------------------------

struct GridEntry {
  Phase kind = Phase::prefill;
  std::vector<Spec> specs;                      // arch unset
  std::vector<std::vector<Problem>> problems;   // problems[i]: every problem of specs[i], validated
  std::vector<int> rows;                        // linear: the m of the sweep (empty: its default)
};

struct PretuneGrid {
  std::vector<GridEntry> entries;
};

// Parses and validates a grid document. Throws qattn::Error(bad_input), one line naming `source`, the
// entry index and the field, e.g. "grid g.json: entries[2].problems.q_len: expected a positive integer
// or a list of them, got \"4k\"".
PretuneGrid parse_pretune_grid(const std::string& json_text, const std::string& source = "grid");
// "default": the built-in grid; anything else: a grid file's path.
PretuneGrid load_pretune_grid(const std::string& name_or_path);
// The built-in grid as a grid document (`qattn pretune --print-grid`): the shipped prefill formats of
// default_grid() (d 64 and 128, causal and not) at 32 heads and 1k..16k tokens (every power of two, so
// no prefill bucket in that range is left to tune at run time), and the row-cache decode families at
// d 128, GQA 4. Sized for about 10 minutes of prefill tuning on one H100 (docs/design/tuning.md, "Pretuning a device").
std::string default_pretune_grid_json();

// ---- Work items ---------------------------------------------------------------------------------------

struct PretuneItem {
  Phase kind = Phase::prefill;
  Spec spec;                    // arch unset: each device resolves its own
  std::string bucket;           // prefill: problem_bucket(problem); decode: "sweep"
  Problem problem;              // prefill: the bucket's representative (what is timed); decode: the first
  std::vector<Problem> sweep;   // decode: every problem of the spec's entries (one per bucket)
  std::vector<int> rows;        // linear: the m of the sweep (empty: LinearSweepOptions' default)
  std::string key() const;      // to_string(spec) + "|" + bucket: stable across runs
};

// One item per (spec, bucket), in grid order (the first problem of a bucket picks its representative's
// batch and heads).
std::vector<PretuneItem> expand_grid(const PretuneGrid& grid);

// The order to tune in: prefill before decode; prefill by descending work (the longest first, so the ETA
// errs high and no long item starts last), and items timed on the same inputs (head dim, output type,
// problem) back to back, so a GPU worker generates each input set once.
std::vector<PretuneItem> order_for_tuning(std::vector<PretuneItem> items);

// ---- Workers and the scheduler --------------------------------------------------------------------------

struct ItemResult {
  bool ok = false;
  std::string detail;   // ok: what was stored (e.g. the winner and its time); else why it failed, one line
};

class PretuneWorker {
 public:
  virtual ~PretuneWorker() = default;
  // Short name for progress lines: "gpu0".
  virtual std::string device_label() = 0;
  // Workers with equal classes store interchangeable results (same device model, SM count, driver):
  // each item runs once per class, on whichever worker of the class is free.
  virtual std::string device_class() = 0;
  // True when the item's result is already stored for this worker's device (then it is skipped).
  virtual bool done(const PretuneItem& item) = 0;
  // Tunes the item and commits its result (one transaction, so an interrupted run keeps it). May throw:
  // the exception's message becomes the item's failure reason.
  virtual ItemResult run(const PretuneItem& item) = 0;
};

// The GPU worker: tunes on CUDA device `device` with its own Runtime and stores the winners in the cache
// file `cache_path` ("" = the default cache). Throws Error(failure) when no writable cache can be
// opened, Error(no_gpu) when the device is not there. Defined in the runtime (`qattn pretune` uses it).
std::unique_ptr<PretuneWorker> make_gpu_pretune_worker(int device, const std::string& cache_path = "");

enum class ItemStatus { ran, resumed, failed, not_run };
const char* to_string(ItemStatus);

struct ItemOutcome {
  std::string key;
  std::string device;   // the worker's label
  ItemStatus status = ItemStatus::not_run;
  double seconds = 0;
  std::string detail;
};

struct PretuneSummary {
  size_t total = 0;   // items x device classes
  size_t ran = 0, resumed = 0, failed = 0, not_run = 0;
  bool cancelled = false;
  double elapsed_s = 0;
  std::vector<ItemOutcome> outcomes;   // ran, resumed and failed items, in the order they finished
  int exit_code() const { return failed || not_run ? 1 : 0; }
};

// {"total":..,"ran":..,"resumed":..,"failed":..,"not_run":..,"cancelled":..,"elapsed_s":..,
//  "items":[{"key":..,"device":..,"status":"ran|resumed|failed","seconds":..,"detail":..},..]}
std::string summary_json(const PretuneSummary& summary);

// What the progress display shows; built under the scheduler's lock, handed to the sink on the calling
// thread of run_pretune only.
struct ProgressState {
  size_t total = 0, finished = 0;   // finished = ran + resumed + failed
  size_t ran = 0, resumed = 0, failed = 0;
  double elapsed_s = 0;
  double mean_item_s = 0;   // mean time of the items that ran (not resumed ones); 0: none yet
  int workers = 1;
  bool cancelling = false;
  std::vector<std::pair<std::string, std::string>> current;   // (device label, item key) in flight
};

class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  virtual void update(const ProgressState& state) = 0;   // after changes, and about once a second
  virtual void item_failed(const ItemOutcome& outcome) { (void)outcome; }
  virtual void finish(const ProgressState& state) { (void)state; }
};

struct PretuneOptions {
  const std::atomic<bool>* cancel = nullptr;   // set: workers finish their current item and stop
  double refresh_s = 1.0;                      // how often the sink is updated while nothing changes
};

// Runs every item once per device class (see PretuneWorker). Never throws for an item's failure; throws
// qattn::Error(bad_input) when there are no workers.
PretuneSummary run_pretune(const std::vector<PretuneItem>& items, const std::vector<PretuneWorker*>& workers,
                           const PretuneOptions& options, ProgressSink& progress);

// Which pending item a worker takes (an index into `pending_specs`, spec texts in queue order): the first
// whose spec no other worker of its class is on (two workers starting one spec would compile its
// candidates twice at the same time), else the first. `pending_specs` must not be empty.
size_t pick_next(const std::vector<std::string>& pending_specs, const std::vector<std::string>& busy_specs);

// ---- Progress display -------------------------------------------------------------------------------------

std::string format_duration(double seconds);   // "45s", "1m12s", "1h02m"; "?" when negative
// Seconds left: mean_item_s x items left / workers; negative when unknown (nothing has run yet).
double eta_seconds(const ProgressState& state);
// "[pretune] 37/120 (31%) elapsed 1m12s ETA 2m35s | gpu0: prefill qk=int8... q4096_kv4096_bh256",
// cut to max_width characters (0: no limit). Specs are shortened so that several devices fit.
std::string format_progress_line(const ProgressState& state, size_t max_width);

// A sink for a terminal: on a TTY one line rewritten in place with '\r'; otherwise a plain line every 5%
// (and the last). Failures are printed as their own lines in both modes.
class TerminalProgress final : public ProgressSink {
 public:
  TerminalProgress(std::FILE* out, bool tty, size_t width = 120) : out_(out), tty_(tty), width_(width) {}
  void update(const ProgressState& state) override;
  void item_failed(const ItemOutcome& outcome) override;
  void finish(const ProgressState& state) override;

 private:
  std::FILE* out_;
  bool tty_;
  size_t width_;
  int last_step_ = -1;         // plain mode: the last 5% step printed
  bool line_open_ = false;     // tty mode: a status line is on screen without its newline
};

}  // namespace qattn
QATTN_PUBLIC_END

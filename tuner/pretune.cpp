// The pretune scheduler: one thread per worker, one queue per device class, results committed by the
// workers as each item finishes (so an interruption keeps everything that finished).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "qattn/error.hpp"
#include "qattn/pretune.hpp"

namespace qattn {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

// done() then run(), with every exception turned into the item's failure: one bad item never stops a run.
ItemOutcome execute(PretuneWorker& worker, const PretuneItem& item, const std::string& key, const std::string& label) {
  ItemOutcome o;
  o.key = key;
  o.device = label;
  const Clock::time_point t0 = Clock::now();
  try {
    if (worker.done(item)) {
      o.status = ItemStatus::resumed;
      o.detail = "already stored";
    } else {
      const ItemResult r = worker.run(item);
      o.status = r.ok ? ItemStatus::ran : ItemStatus::failed;
      o.detail = r.ok || !r.detail.empty() ? r.detail : "failed without a reason";
    }
  } catch (const std::exception& e) {
    o.status = ItemStatus::failed;
    o.detail = e.what();
  } catch (...) {
    o.status = ItemStatus::failed;
    o.detail = "unknown exception";
  }
  o.seconds = seconds_since(t0);
  o.detail = one_line(o.detail);
  return o;
}

struct ClassQueue {
  std::vector<size_t> pending;      // item indices, in queue order
  std::vector<std::string> busy;    // spec texts the class's workers are on
};

}  // namespace

const char* to_string(ItemStatus s) {
  switch (s) {
    case ItemStatus::ran: return "ran";
    case ItemStatus::resumed: return "resumed";
    case ItemStatus::failed: return "failed";
    case ItemStatus::not_run: return "not_run";
  }
  return "?";
}

size_t pick_next(const std::vector<std::string>& pending_specs, const std::vector<std::string>& busy_specs) {
  for (size_t i = 0; i < pending_specs.size(); ++i)
    if (std::find(busy_specs.begin(), busy_specs.end(), pending_specs[i]) == busy_specs.end()) return i;
  return 0;
}

PretuneSummary run_pretune(const std::vector<PretuneItem>& items, const std::vector<PretuneWorker*>& workers,
                           const PretuneOptions& options, ProgressSink& progress) {
  if (workers.empty()) throw_bad_input("pretune needs at least one device to run on");
  const Clock::time_point start = Clock::now();
  std::vector<std::string> keys, specs;
  for (const PretuneItem& it : items) {
    keys.push_back(it.key());
    specs.push_back(to_string(it.spec));
  }
  std::vector<std::string> labels;
  std::vector<size_t> class_of;
  std::map<std::string, size_t> class_ids;
  for (PretuneWorker* w : workers) {
    labels.push_back(w->device_label());
    class_of.push_back(class_ids.emplace(w->device_class(), class_ids.size()).first->second);
  }
  std::vector<ClassQueue> queues(class_ids.size());
  for (ClassQueue& q : queues)
    for (size_t i = 0; i < items.size(); ++i) q.pending.push_back(i);

  std::mutex mutex;   // guards everything below
  std::condition_variable changed_cv;
  bool changed = false;
  PretuneSummary summary;
  summary.total = items.size() * queues.size();
  std::vector<std::string> current(workers.size());
  std::vector<ItemOutcome> unreported_failures;
  double timed_seconds = 0;   // sum over items that ran or failed (resumed ones cost nothing)
  size_t active = workers.size();
  auto cancelled = [&] { return options.cancel && options.cancel->load(); };

  auto work = [&](size_t w) {
    ClassQueue& queue = queues[class_of[w]];
    for (;;) {
      size_t index = 0;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (cancelled() || queue.pending.empty()) break;
        std::vector<std::string> pending_specs;
        for (size_t i : queue.pending) pending_specs.push_back(specs[i]);
        const size_t at = pick_next(pending_specs, queue.busy);
        index = queue.pending[at];
        queue.pending.erase(queue.pending.begin() + static_cast<long>(at));
        queue.busy.push_back(specs[index]);
        current[w] = keys[index];
        changed = true;
      }
      changed_cv.notify_all();
      ItemOutcome outcome = execute(*workers[w], items[index], keys[index], labels[w]);
      {
        std::lock_guard<std::mutex> lock(mutex);
        queue.busy.erase(std::find(queue.busy.begin(), queue.busy.end(), specs[index]));
        current[w].clear();
        if (outcome.status == ItemStatus::resumed) ++summary.resumed;
        else timed_seconds += outcome.seconds;
        if (outcome.status == ItemStatus::ran) ++summary.ran;
        if (outcome.status == ItemStatus::failed) {
          ++summary.failed;
          unreported_failures.push_back(outcome);
        }
        summary.outcomes.push_back(std::move(outcome));
        changed = true;
      }
      changed_cv.notify_all();
    }
    std::lock_guard<std::mutex> lock(mutex);
    --active;
    changed = true;
    changed_cv.notify_all();
  };

  auto snapshot = [&] {   // under the lock
    ProgressState s;
    s.total = summary.total;
    s.ran = summary.ran;
    s.resumed = summary.resumed;
    s.failed = summary.failed;
    s.finished = s.ran + s.resumed + s.failed;
    s.elapsed_s = seconds_since(start);
    const size_t timed = s.ran + s.failed;
    s.mean_item_s = timed ? timed_seconds / static_cast<double>(timed) : 0;
    s.workers = static_cast<int>(workers.size());
    s.cancelling = cancelled() && active > 0;
    for (size_t w = 0; w < workers.size(); ++w)
      if (!current[w].empty()) s.current.emplace_back(labels[w], current[w]);
    return s;
  };

  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers.size(); ++w) threads.emplace_back(work, w);
  // Only this thread talks to the sink, so sinks need no locking of their own.
  std::unique_lock<std::mutex> lock(mutex);
  for (;;) {
    const ProgressState state = snapshot();
    std::vector<ItemOutcome> failures;
    failures.swap(unreported_failures);
    const bool finished = active == 0;
    lock.unlock();
    for (const ItemOutcome& f : failures) progress.item_failed(f);
    progress.update(state);
    if (finished) break;
    lock.lock();
    changed_cv.wait_for(lock, std::chrono::duration<double>(options.refresh_s), [&] { return changed; });
    changed = false;
  }
  for (std::thread& t : threads) t.join();
  lock.lock();
  summary.not_run = summary.total - summary.ran - summary.resumed - summary.failed;
  summary.cancelled = cancelled();
  summary.elapsed_s = seconds_since(start);
  const ProgressState last = snapshot();
  lock.unlock();
  progress.finish(last);
  return summary;
}

std::string summary_json(const PretuneSummary& s) {
  nlohmann::json items = nlohmann::json::array();
  for (const ItemOutcome& o : s.outcomes)
    items.push_back({{"key", o.key}, {"device", o.device}, {"status", to_string(o.status)}, {"seconds", o.seconds},
                     {"detail", o.detail}});
  const nlohmann::json j = {{"total", s.total},         {"ran", s.ran},       {"resumed", s.resumed},
                            {"failed", s.failed},       {"not_run", s.not_run}, {"cancelled", s.cancelled},
                            {"elapsed_s", s.elapsed_s}, {"items", items}};
  return j.dump(2);
}

}  // namespace qattn

// The pretune progress display: pure formatting (tested) and a terminal sink around it.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "qattn/pretune.hpp"

namespace qattn {
namespace {

// "gpu0: <spec> <bucket>", the spec cut with "..." so that the part fits `budget` characters (0: no
// limit); the bucket says which size is being timed, so it is kept whole.
std::string current_part(const std::string& label, const std::string& key, size_t budget) {
  const size_t bar = key.rfind('|');
  const std::string spec = bar == std::string::npos ? key : key.substr(0, bar);
  const std::string bucket = bar == std::string::npos ? std::string() : key.substr(bar + 1);
  const std::string head = label + ": ";
  const std::string tail = bucket.empty() ? std::string() : " " + bucket;
  if (budget == 0 || head.size() + spec.size() + tail.size() <= budget) return head + spec + tail;
  const size_t fixed = head.size() + tail.size() + 3;   // 3: "..."
  if (budget >= fixed + 8) return head + spec.substr(0, budget - fixed) + "..." + tail;
  return head + (bucket.empty() ? spec.substr(0, 8) + "..." : bucket);
}

}  // namespace

std::string format_duration(double seconds) {
  if (seconds < 0 || !std::isfinite(seconds)) return "?";
  const long long s = std::llround(seconds);
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%llds", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  return buf;
}

double eta_seconds(const ProgressState& st) {
  if (st.finished >= st.total) return 0;
  if (st.mean_item_s <= 0) return -1;
  return st.mean_item_s * static_cast<double>(st.total - st.finished) / (st.workers > 0 ? st.workers : 1);
}

std::string format_progress_line(const ProgressState& st, size_t max_width) {
  const int pct = st.total ? static_cast<int>(st.finished * 100 / st.total) : 100;
  char head[160];
  std::snprintf(head, sizeof head, "[pretune] %zu/%zu (%d%%) elapsed %s ETA %s", st.finished, st.total, pct,
                format_duration(st.elapsed_s).c_str(), format_duration(eta_seconds(st)).c_str());
  std::string line = head;
  if (st.failed) line += " failed " + std::to_string(st.failed);
  if (st.cancelling) line += " (stopping after the current items)";
  if (!st.current.empty()) {
    line += " |";
    const size_t room = max_width > line.size() ? max_width - line.size() : 0;
    const size_t budget = max_width == 0 ? 0 : std::max<size_t>(1, room / st.current.size()) - 1;
    for (const auto& [label, key] : st.current) line += " " + current_part(label, key, budget);
  }
  if (max_width && line.size() > max_width) line.resize(max_width);
  return line;
}

void TerminalProgress::update(const ProgressState& st) {
  if (tty_) {
    std::fprintf(out_, "\r%s\033[K", format_progress_line(st, width_).c_str());
    line_open_ = true;
  } else {
    // Plain output (a log file, CI): a line each 5%, so a long run neither floods nor goes silent.
    const int step = st.total ? static_cast<int>(st.finished * 20 / st.total) : 20;
    if (step <= last_step_) return;
    last_step_ = step;
    std::fprintf(out_, "%s\n", format_progress_line(st, 0).c_str());
  }
  std::fflush(out_);
}

void TerminalProgress::item_failed(const ItemOutcome& o) {
  if (tty_ && line_open_) std::fputs("\r\033[K", out_);
  line_open_ = false;
  std::fprintf(out_, "[pretune] FAILED %s on %s: %s\n", o.key.c_str(), o.device.c_str(), o.detail.c_str());
  std::fflush(out_);
}

void TerminalProgress::finish(const ProgressState& st) {
  if (tty_) {
    std::fprintf(out_, "\r%s\033[K\n", format_progress_line(st, width_).c_str());
  } else {
    const int step = st.total ? static_cast<int>(st.finished * 20 / st.total) : 20;
    if (step > last_step_ || st.finished < st.total) std::fprintf(out_, "%s\n", format_progress_line(st, 0).c_str());
    last_step_ = step;
  }
  line_open_ = false;
  std::fflush(out_);
}

}  // namespace qattn

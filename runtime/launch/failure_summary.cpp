// failure_summary.cpp - the failure table (see failure_summary.h).
#include "runtime/launch/failure_summary.h"

#include <algorithm>
#include <cstdio>

#include "runtime/core/terminal_text.h"
#include "runtime/launch/host.h"

namespace ddp::launch {

std::string WorkerOutcome::describe() const {
  if (!exited) return "still running";
  if (signal) return signal_name(signal) + " (signal " + std::to_string(signal) + ")";
  return "exit code " + std::to_string(exit_code);
}

namespace {
constexpr size_t kShownStderrBytes = 1 << 20;
}  // namespace

void ShownStderr::add(const std::string& line) {
  tail_ += line;
  if (tail_.size() > 2 * kShownStderrBytes) tail_.erase(0, tail_.size() - kShownStderrBytes);
}

bool ShownStderr::shows(const std::string& message) const {
  return !message.empty() && tail_.find(message) != std::string::npos;
}

namespace {
// One row per worker; `note_of(i)` is what follows the row.
template <class NoteOf>
std::string worker_table(const std::vector<WorkerOutcome>& workers, NoteOf note_of) {
  std::string out;
  char row[1024];
  std::snprintf(row, sizeof(row), "  %-5s %-6s %-8s %-22s %-9s %-s\n", "rank", "local", "pid", "result",
                "elapsed", "log file");
  out += row;
  for (size_t i = 0; i < workers.size(); ++i) {
    const WorkerOutcome& w = workers[i];
    const std::string note = note_of(i);
    char elapsed[32];
    std::snprintf(elapsed, sizeof(elapsed), "%.2fs", w.elapsed_s);
    std::snprintf(row, sizeof(row), "  %-5d %-6d %-8d %-22s %-9s %s%s\n", w.rank, w.local_rank,
                  static_cast<int>(w.pid), w.describe().c_str(), elapsed,
                  w.log_file.empty() ? "-" : w.log_file.c_str(), note.c_str());
    out += row;
  }
  return out;
}
}  // namespace

std::string stall_summary(const std::vector<WorkerOutcome>& workers, size_t waiter, double waited_s,
                          double limit_s, int attempt, int max_restarts) {
  char head[512];
  std::snprintf(head, sizeof(head),
                "ddprun: run stopped by the stall watchdog on attempt %d of %d: rank %d waited %.1f s on a "
                "collective with no progress (--stall-timeout %g s); ddprun exits with %d\n",
                attempt + 1, max_restarts + 1, workers.at(waiter).rank, waited_s, limit_s, kStallExitCode);
  return head + worker_table(workers, [&](size_t i) -> std::string {
           const WorkerOutcome& w = workers[i];
           if (i == waiter) return "  <- waited longest";
           if (w.stopped_by_launcher()) return "  (stopped by ddprun)";
           return w.failed() ? "  (failed)" : "";
         });
}

std::string failure_summary(const std::vector<WorkerOutcome>& workers, size_t root, int attempt,
                            int max_restarts) {
  int failed = 0;
  for (auto& w : workers) failed += w.failed() && !w.stopped_by_launcher() ? 1 : 0;
  std::string out = "ddprun: run failed: " + std::to_string(failed) + " of " +
                    std::to_string(workers.size()) + " workers failed on attempt " +
                    std::to_string(attempt + 1) + " of " + std::to_string(max_restarts + 1) +
                    " (no restarts left)\n";
  out += worker_table(workers, [&](size_t i) -> std::string {
    const WorkerOutcome& w = workers[i];
    return i == root                               ? "  <- root cause (first failure)"
           : w.stopped_by_launcher()               ? "  (stopped by ddprun)"
           : w.failed() && w.signalled_by_launcher ? "  (failed too, after ddprun's SIGTERM)"
           : w.failed()                            ? "  (failed too, on its own)"
                                                   : "";
  });
  // Each failed worker's own text, escaped as ddprun's own errors are (a terminal must not get raw bytes).
  // Of a message of several lines that the console showed already as the worker's output, only the first
  // line, with where the rest is: each rank's whole message appears once.
  for (const WorkerOutcome& w : workers) {
    if (!w.failed() || w.error_message.empty()) continue;
    const std::string rank = std::to_string(w.rank);
    const size_t first_end = w.error_message.find('\n');
    if (w.error_message_shown && first_end != std::string::npos) {
      const auto lines = 1 + std::count(w.error_message.begin(), w.error_message.end(), '\n');
      out += "ddprun: rank " + rank + " error (" + std::to_string(lines) + " lines, printed above by rank " +
             rank + "): " + log::escape_for_terminal(w.error_message.substr(0, first_end)) + "\n";
    } else {
      out += "ddprun: rank " + rank + " error: " + log::escape_for_terminal(w.error_message) + "\n";
    }
  }
  const WorkerOutcome& r = workers.at(root);
  out += "ddprun: root cause: rank " + std::to_string(r.rank) + " (local rank " +
         std::to_string(r.local_rank) + ", pid " + std::to_string(r.pid) + ") ended with " + r.describe() +
         "; ddprun exits with " + std::to_string(r.shell_code()) + "\n";
  return out;
}

}  // namespace ddp::launch

// failure_summary.h - how a worker ended and the table ddprun prints when a run fails for good:
// one row per worker (rank, local rank, pid, exit code or signal name, elapsed time, log file), the first
// failure marked "root cause", then the error message each failed worker left in its error file - or, for a
// message of several lines that the worker printed on its stderr and the console showed, its first line and
// where the rest is (so a message appears once per rank, not twice). Formatting only; the supervisor fills
// the records.
#pragma once
#include <string>
#include <sys/types.h>
#include <vector>

namespace ddp::launch {

struct WorkerOutcome {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  bool exited = false;               // false: still running when the summary was made (should not happen)
  int exit_code = 0;                 // when it exited normally
  int signal = 0;                    // when a signal ended it (exit_code unused)
  bool signalled_by_launcher = false;  // ddprun sent it SIGTERM (SIGKILL) while it ran: another worker failed
  double elapsed_s = 0;
  std::string log_file;       // empty without --log-dir
  std::string error_message;  // what the worker wrote to its TORCHELASTIC_ERROR_FILE ("" when nothing)
  // The worker printed error_message on its stderr and ddprun showed that on its console: the summary
  // refers to it instead of printing all its lines again.
  bool error_message_shown = false;

  bool failed() const { return exited && (signal != 0 || exit_code != 0); }
  // Ended by ddprun's signal. A worker that exited with a code of its own - before the signal came, or by
  // handling it - was not stopped by ddprun, and counts as failed when the code is not 0.
  bool stopped_by_launcher() const { return exited && signalled_by_launcher && signal != 0; }
  // The code a shell would report: the exit code, or 128 + signal.
  int shell_code() const { return signal ? 128 + signal : exit_code; }
  // "exit code 3", "SIGKILL (signal 9)".
  std::string describe() const;
};

// The last part (1 MiB) of what the console showed of one worker's stderr, to tell whether it showed the
// worker's error message.
class ShownStderr {
 public:
  void add(const std::string& line);
  // The whole message, as one piece of the shown text.
  bool shows(const std::string& message) const;

 private:
  std::string tail_;
};

// The table; `root` indexes the first failed worker in `workers`, `attempt` counts from 0.
std::string failure_summary(const std::vector<WorkerOutcome>& workers, size_t root, int attempt,
                            int max_restarts);

// What ddprun exits with when its stall watchdog stopped the job (as timeout(1) does).
inline constexpr int kStallExitCode = 124;
// The table when the stall watchdog stopped the job: `waiter` indexes the worker that waited longest.
std::string stall_summary(const std::vector<WorkerOutcome>& workers, size_t waiter, double waited_s,
                          double limit_s, int attempt, int max_restarts);

}  // namespace ddp::launch

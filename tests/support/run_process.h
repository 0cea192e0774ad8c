// run_process.h - runs a command for the launcher tests with captured stdout/stderr, extra environment
// variables and a hard timeout (the child's process group is killed when it passes), so no test can hang.
#pragma once
#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ddp::testing {

struct ProcessResult {
  int exit_code = -1;  // exit code, or 128 + signal
  bool timed_out = false;
  std::string out, err;
};

struct ProcessOptions {
  std::map<std::string, std::string> set_env;  // added to (or replacing in) the test's environment
  std::vector<std::string> unset_env;          // removed before set_env is applied
  double timeout_s = 60;
  // Called once with the child's pid right after it starts (e.g. to send it a signal later).
  std::function<void(pid_t)> on_start;
  // Called while waiting, about every 20 ms, with the output so far; may signal the child.
  std::function<void(pid_t, const std::string& out, const std::string& err)> on_progress;
};

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& opt = {});

// "--- rank R exit E" then stdout and stderr, for each result in order: the failure text of a multi-rank
// test.
std::string describe_ranks(const std::vector<ProcessResult>& results);

// True when no process with this pid exists any more, or it is a zombie nobody reaped yet.
bool process_gone(pid_t pid);

// Paths of the programs under test.
std::string ddprun_path();
std::string launch_worker_path();

}  // namespace ddp::testing

// run_process.cpp - fork/exec with pipes, poll with a deadline, and a /proc check for vanished pids.
#include "tests/support/run_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace ddp::testing {

std::string ddprun_path() { return std::string(DDP_BIN_DIR) + "/ddprun"; }
std::string launch_worker_path() { return std::string(DDP_BIN_DIR) + "/testprog_launch_worker"; }

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& opt) {
  ProcessResult res;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return res;
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    for (auto& k : opt.unset_env) ::unsetenv(k.c_str());
    for (auto& [k, v] : opt.set_env) ::setenv(k.c_str(), v.c_str(), 1);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::execv(cargv[0], cargv.data());
    ::_exit(126);
  }
  ::setpgid(pid, pid);
  ::close(out[1]);
  ::close(err[1]);
  if (opt.on_start) opt.on_start(pid);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opt.timeout_s);
  int fds[2] = {out[0], err[0]};
  std::string* sinks[2] = {&res.out, &res.err};
  int open_count = 2;
  while (open_count > 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      res.timed_out = true;
      ::kill(-pid, SIGKILL);
      break;
    }
    pollfd p[2];
    nfds_t n = 0;
    int which[2];
    for (int i = 0; i < 2; ++i)
      if (fds[i] >= 0) p[n] = {fds[i], POLLIN, 0}, which[n++] = i;
    ::poll(p, n, 20);
    for (nfds_t j = 0; j < n; ++j) {
      if (!p[j].revents) continue;
      char buf[65536];
      ssize_t got = ::read(p[j].fd, buf, sizeof(buf));
      if (got > 0) {
        sinks[which[j]]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(p[j].fd);
        fds[which[j]] = -1;
        --open_count;
      }
    }
    if (opt.on_progress) opt.on_progress(pid, res.out, res.err);
  }
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  int status = 0;
  // The pipes are closed; the child may still be finishing: wait, bounded by the same deadline.
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      res.timed_out = true;
      ::kill(-pid, SIGKILL);
    }
    ::usleep(5000);
  }
  res.exit_code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  return res;
}

bool process_gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  // Format: pid (comm) state ...; comm may contain spaces, so look after the last ')'.
  size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return true;
  return line[close + 2] == 'Z' || line[close + 2] == 'X';
}

std::string describe_ranks(const std::vector<ProcessResult>& results) {
  std::string s;
  for (size_t r = 0; r < results.size(); ++r)
    s += "--- rank " + std::to_string(r) + " exit " + std::to_string(results[r].exit_code) + "\n" +
         results[r].out + results[r].err;
  return s;
}

}  // namespace ddp::testing

// supervisor.cpp - fork/exec of the workers, the poll loop over their pipes and a signalfd, failure
// handling and restarts (see supervisor.h for the process model).
#include "runtime/launch/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/distributed/shm/shm_segment.h"
#include "runtime/launch/error_file.h"
#include "runtime/launch/failure_summary.h"
#include "runtime/launch/ft_agent.h"
#include "runtime/launch/host.h"
#include "runtime/launch/line_buffer.h"
#include "runtime/launch/stall_watchdog.h"
#include "runtime/launch/worker_env.h"

namespace ddp::launch {

namespace {

using Clock = std::chrono::steady_clock;

// How long ddprun waits for the ranks' flight records after asking for them (SIGUSR1), before it stops them.
constexpr auto kDumpWait = std::chrono::seconds(5);
// How often the stall watchdog looks at the progress pages.
constexpr int kWatchdogPollMs = 200;

// A process stopped by a signal (SIGSTOP, Ctrl-Z; state 'T' in /proc/<pid>/stat) cannot write its flight
// record; ddprun does not wait for it (nor continue it: that could let the collective it blocks complete).
bool process_stopped(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  const size_t close = stat.rfind(')');  // the command name may hold spaces and parentheses
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'T';
}

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// Writes all of s (retrying short writes); output errors (a closed console pipe) are ignored.
void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

void note(const std::string& msg) { write_all(STDERR_FILENO, "ddprun: " + msg + "\n"); }

struct Stream {
  int fd = -1;
  bool is_err = false;
  LineBuffer lines;
};

struct Worker {
  WorkerOutcome outcome;
  Stream out, err;
  ShownStderr shown_err;  // what the console showed of its stderr (the summary need not repeat its error)
  int log_fd = -1;
  std::string error_file;  // TORCHELASTIC_ERROR_FILE of this worker
  Clock::time_point started;
  bool running = false;
  int incarnation = 0;  // --fault-tolerant: which process of this slot (0 first, +1 per replacement)
};

class Supervisor {
 public:
  explicit Supervisor(const LaunchConfig& c) : c_(c), inherited_(current_environment()) {}
  ~Supervisor();
  int run();

 private:
  enum class End { AllSucceeded, WorkerFailed, Stalled, Interrupted };
  void install_signals();
  void start_attempt(int attempt);
  void spawn(Worker& w, int attempt);
  End monitor();
  void read_stream(Worker& w, Stream& s, bool until_drained);
  void close_stream(Worker& w, Stream& s);
  void emit(Worker& w, bool is_err, const std::string& line);
  void reap();
  void begin_stop(int sig);
  void signal_running(int sig);
  void remove_worker_segments();
  // Flight records: the folder of the run and of this attempt; asking the ranks for their records before
  // stopping them (SIGUSR1, then SIGCONT for a stopped one); whether every asked rank wrote one.
  void make_flight_root();
  std::string flight_record_of(const Worker& w) const;
  void stop_after_dumps();
  bool dumps_done() const;
  void check_stall();
  std::string flight_note() const;

  const LaunchConfig& c_;
  std::vector<std::string> removed_segments_;  // this attempt's, removed as each worker exited
  std::map<std::string, std::string> inherited_;
  std::string error_dir_;  // without --log-dir: a private temporary folder for the workers' error files
  sigset_t handled_{}, old_mask_{};
  int sigfd_ = -1;
  std::vector<Worker> workers_;
  int root_ = -1;
  int received_signal_ = 0;
  bool stopping_ = false, killed_ = false;
  Clock::time_point kill_at_;
  std::string flight_root_;        // the run's flight folder
  bool flight_root_temporary_ = false;
  std::string flight_dir_;         // this attempt's (DDP_FLIGHT_RECORDER_DIR of the workers)
  std::unique_ptr<StallWatchdog> watchdog_;
  bool dumping_ = false;           // asked the ranks for their records; stopping them once written
  Clock::time_point dump_deadline_;
  std::vector<bool> dump_asked_;   // per worker: it was sent SIGUSR1
  std::vector<uint64_t> dumps_before_;  // per worker: the requests it had answered before that one
  std::optional<Stall> stall_;
  // --fault-tolerant: the store, coordinator and exit reports; lost workers are replaced (start_replacement)
  // and their outcomes kept for the summary.
  void ft_tick();
  void start_replacement(size_t local);
  std::unique_ptr<FtAgent> ft_;
  int replacements_left_ = 0;
  std::vector<std::optional<Clock::time_point>> replace_at_;  // per local rank: a replacement is due then
  std::vector<WorkerOutcome> ft_lost_;
  int ft_replaced_ = 0;
};

Supervisor::~Supervisor() {
  signal_running(SIGKILL);  // only reached with workers alive when an error interrupted the supervisor
  if (!error_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(error_dir_, ec);
  }
  if (sigfd_ >= 0) {
    ::close(sigfd_);
    ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  }
}

void Supervisor::install_signals() {
  sigemptyset(&handled_);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled_, sig);
  DDP_CHECK(::sigprocmask(SIG_BLOCK, &handled_, &old_mask_) == 0,
            "ddprun: sigprocmask: ", std::strerror(errno));
  sigfd_ = ::signalfd(-1, &handled_, SFD_CLOEXEC | SFD_NONBLOCK);
  DDP_CHECK(sigfd_ >= 0, "ddprun: signalfd: ", std::strerror(errno));
  std::signal(SIGPIPE, SIG_IGN);  // a closed console must not kill the supervisor
}

void Supervisor::spawn(Worker& w, int attempt) {
  const int local = w.outcome.local_rank;
  std::vector<std::string> args = worker_args(c_, local);
  std::vector<std::string> env = worker_environment(c_, local, attempt, inherited_, w.error_file, flight_dir_,
                                                    watchdog_ ? watchdog_->page_path(local) : "", w.incarnation);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out[2], err[2];
  DDP_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0,
            "ddprun: pipe2: ", std::strerror(errno));
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  DDP_CHECK(devnull >= 0, "ddprun: cannot open /dev/null: ", std::strerror(errno));
  const pid_t parent = ::getpid();
  const std::string exec_failed = "ddprun: cannot execute " + c_.program_path + ": ";

  pid_t pid = ::fork();
  DDP_CHECK(pid >= 0, "ddprun: fork failed: ", std::strerror(errno));
  if (pid == 0) {
    // Child: only async-signal-safe calls from here to exec.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);  // ddprun died before prctl took effect
    ::dup2(devnull, STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD}) ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(c_.program_path.c_str(), argv.data(), envp.data());
    int e = errno;
    write_all(STDERR_FILENO, exec_failed + std::strerror(e) + "\n");
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, so the group exists before any kill(-pid); races are harmless
  ::close(devnull);
  ::close(out[1]);
  ::close(err[1]);
  for (int fd : {out[0], err[0]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  w.out.fd = out[0];
  w.err.fd = err[0];
  w.err.is_err = true;
  w.outcome.pid = pid;
  w.started = Clock::now();
  w.running = true;
}

void Supervisor::start_attempt(int attempt) {
  workers_.clear();
  workers_.resize(static_cast<size_t>(c_.nproc_per_node));
  root_ = -1;
  stopping_ = killed_ = false;
  dumping_ = false;
  stall_.reset();
  std::string dir;
  if (!c_.log_dir.empty()) {
    dir = c_.log_dir + "/attempt_" + std::to_string(attempt);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    DDP_CHECK(!ec, "ddprun: cannot create log directory ", dir, ": ", ec.message(), "; check --log-dir");
  }
  // This attempt's flight folder: with restarts (or under --log-dir) one per attempt, so a restart does not
  // overwrite the records of the failure that caused it. A previous run's records there are removed.
  flight_dir_ = !c_.log_dir.empty() && flight_root_ == c_.log_dir
                    ? c_.log_dir + "/attempt_" + std::to_string(attempt) + "/flight"
                : c_.max_restarts > 0 ? flight_root_ + "/attempt_" + std::to_string(attempt)
                                      : flight_root_;
  {
    std::error_code ec;
    std::filesystem::create_directories(flight_dir_, ec);
    DDP_CHECK(!ec, "ddprun: cannot create the flight record folder ", flight_dir_, ": ", ec.message(),
              "; check --flight-dir");
    for (const auto& e : std::filesystem::directory_iterator(flight_dir_, ec)) {
      const std::string name = e.path().filename().string();
      if ((name.rfind("flight.rank", 0) == 0 && e.path().extension() == ".json") ||
          name.rfind("progress.rank", 0) == 0)
        std::filesystem::remove(e.path(), ec);
    }
  }
  std::vector<int> ranks;
  for (int local = 0; local < c_.nproc_per_node; ++local) ranks.push_back(c_.global_rank(local));
  watchdog_ = std::make_unique<StallWatchdog>(flight_dir_, ranks, c_.stall_timeout_s);
  for (int local = 0; local < c_.nproc_per_node; ++local) {
    Worker& w = workers_[static_cast<size_t>(local)];
    w.outcome.local_rank = local;
    w.outcome.rank = c_.global_rank(local);
    // Where the worker writes its error message (torchrun's layout under --log-dir).
    if (!dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(dir + "/" + std::to_string(local), ec);
      w.error_file = ec ? "" : dir + "/" + std::to_string(local) + "/error.json";
    } else if (!error_dir_.empty()) {
      w.error_file = error_dir_ + "/attempt_" + std::to_string(attempt) + "_rank_" +
                     std::to_string(w.outcome.rank) + ".json";
    }
    if (!w.error_file.empty()) {
      std::error_code ec;
      std::filesystem::remove(w.error_file, ec);  // never show an older run's message
    }
    if (!dir.empty()) {
      w.outcome.log_file = dir + "/rank_" + std::to_string(w.outcome.rank) + ".log";
      w.log_fd = ::open(w.outcome.log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      DDP_CHECK(w.log_fd >= 0, "ddprun: cannot create log file ", w.outcome.log_file, ": ",
                std::strerror(errno));
    }
    spawn(w, attempt);
  }
}

void Supervisor::emit(Worker& w, bool is_err, const std::string& line) {
  if (w.log_fd >= 0) write_all(w.log_fd, line);
  bool teed = c_.log_dir.empty() || (c_.tee & (is_err ? 2 : 1));
  if (teed && c_.shows_on_console(w.outcome.local_rank)) {
    write_all(is_err ? STDERR_FILENO : STDOUT_FILENO,
              "[rank " + std::to_string(w.outcome.rank) + "] " + line);
    if (is_err) w.shown_err.add(line);
  }
}

void Supervisor::close_stream(Worker& w, Stream& s) {
  std::string tail;
  if (s.lines.flush(&tail)) emit(w, s.is_err, tail);
  if (s.fd >= 0) ::close(s.fd);
  s.fd = -1;
}

void Supervisor::read_stream(Worker& w, Stream& s, bool until_drained) {
  char buf[65536];
  std::vector<std::string> lines;
  while (s.fd >= 0) {
    ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      // A finished worker whose pipe is still held open by a child of its own: stop reading it here.
      if (until_drained) close_stream(w, s);
      return;
    }
    if (n <= 0) {
      close_stream(w, s);
      return;
    }
    lines.clear();
    s.lines.feed(buf, static_cast<size_t>(n), &lines);
    for (auto& l : lines) emit(w, s.is_err, l);
    if (!until_drained) return;  // one read per wake-up keeps a chatty rank from starving the others
  }
}

void Supervisor::signal_running(int sig) {
  for (auto& w : workers_)
    if (w.running) ::kill(-w.outcome.pid, sig);
}

// The shared-memory group unlinks its segments once every rank mapped them; a worker killed before that (or a
// crash between creating and unlinking) leaves /dev/shm/ddpshm.<ns>.<pid>.* behind. reap() removes each
// worker's as it exits, before reaping it (while it is a zombie, no other group's sweep touches them); here,
// after the attempt, whatever else is left under the workers' pids, and the note of all of them.
void Supervisor::remove_worker_segments() {
  std::vector<pid_t> pids;
  for (auto& w : workers_)
    if (w.outcome.pid > 0) pids.push_back(w.outcome.pid);
  for (auto& n : dist::shm::remove_segments_of(pids)) removed_segments_.push_back(std::move(n));
  if (!removed_segments_.empty())
    note("removed " + std::to_string(removed_segments_.size()) +
         " shared-memory segment(s) the workers left in /dev/shm (" + removed_segments_.front() +
         (removed_segments_.size() > 1 ? ", ..." : "") + ")");
  removed_segments_.clear();
}

void Supervisor::begin_stop(int sig) {
  stopping_ = true;
  kill_at_ = Clock::now() +
             std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(c_.grace_period_s));
  // Only a worker still alive gets the signal from us: one that has already exited on its own (a peer that
  // noticed the failure first) is a zombie not yet reaped, and its ending is its own.
  for (auto& w : workers_) {
    if (!w.running) continue;
    siginfo_t info{};
    const bool exited =
        ::waitid(P_PID, static_cast<id_t>(w.outcome.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == w.outcome.pid;
    w.outcome.signalled_by_launcher = !exited;
  }
  signal_running(sig);
}

void Supervisor::reap() {
  for (;;) {
    // An exited child, not yet reaped (WNOWAIT): its segments go first, then the zombie.
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) break;
    const pid_t pid = info.si_pid;
    for (auto& n : dist::shm::remove_segments_of({pid})) removed_segments_.push_back(std::move(n));
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) break;
    for (size_t i = 0; i < workers_.size(); ++i) {
      Worker& w = workers_[i];
      if (!w.running || w.outcome.pid != pid) continue;
      w.running = false;
      w.outcome.exited = true;
      w.outcome.elapsed_s = std::chrono::duration<double>(Clock::now() - w.started).count();
      if (WIFSIGNALED(status))
        w.outcome.signal = WTERMSIG(status);
      else
        w.outcome.exit_code = WEXITSTATUS(status);
      read_stream(w, w.out, true);  // everything it wrote is in the pipe by now
      read_stream(w, w.err, true);
      if (w.outcome.failed() && !w.error_file.empty())
        w.outcome.error_message = read_error_file(w.error_file).value_or("");
      w.outcome.error_message_shown = w.shown_err.shows(w.outcome.error_message);
      if (w.log_fd >= 0) ::close(w.log_fd);
      w.log_fd = -1;
      if (ft_ && !stopping_) {
        // --fault-tolerant: a lost worker leaves the job; the coordinator publishes the next epoch.
        if (w.outcome.failed()) {
          ft_->worker_ended(w.outcome.rank, w.incarnation, true, w.outcome.describe());
          note("rank " + std::to_string(w.outcome.rank) + " (incarnation " + std::to_string(w.incarnation) +
               ", pid " + std::to_string(w.outcome.pid) + ") ended with " + w.outcome.describe() +
               "; the others go on (--fault-tolerant)");
          ft_lost_.push_back(w.outcome);
        }
        continue;
      }
      if (w.outcome.failed() && root_ < 0 && !stopping_) {
        w.outcome.signalled_by_launcher = false;
        root_ = static_cast<int>(i);
        if (!dumping_) stop_after_dumps();
      }
    }
  }
}

Supervisor::End Supervisor::monitor() {
  for (;;) {
    bool any_running = false;
    for (auto& w : workers_) any_running = any_running || w.running;
    for (auto& at : replace_at_) any_running = any_running || (at.has_value() && !stopping_);
    if (!any_running) break;
    std::vector<pollfd> fds{{sigfd_, POLLIN, 0}};
    std::vector<std::pair<Worker*, Stream*>> owners{{nullptr, nullptr}};
    for (auto& w : workers_) {
      for (Stream* s : {&w.out, &w.err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        owners.emplace_back(&w, s);
      }
    }
    int timeout_ms = -1;
    if (stopping_ && !killed_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(kill_at_ - Clock::now()).count();
      timeout_ms = static_cast<int>(std::max<long long>(0, left) + 1);
    } else if (dumping_) {
      timeout_ms = 50;  // looks for the records as they appear
    } else if (!stopping_ && watchdog_ && watchdog_->limit_s() > 0) {
      timeout_ms = kWatchdogPollMs;
    }
    if (ft_ && !stopping_) timeout_ms = timeout_ms < 0 ? FtAgent::kTickMs : std::min(timeout_ms, FtAgent::kTickMs);
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    DDP_CHECK(n >= 0 || errno == EINTR, "ddprun: poll: ", std::strerror(errno));
    if (stopping_ && !killed_ && Clock::now() >= kill_at_) {
      signal_running(SIGKILL);
      killed_ = true;
    }
    if (dumping_ && !stopping_ && (dumps_done() || Clock::now() >= dump_deadline_)) {
      dumping_ = false;
      begin_stop(SIGTERM);
    }
    if (!dumping_ && !stopping_) check_stall();
    if (ft_ && !stopping_) ft_tick();
    if (n <= 0) continue;
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents) read_stream(*owners[i].first, *owners[i].second, false);
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(sigfd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        int sig = static_cast<int>(info.ssi_signo);
        if (sig == SIGCHLD) {
          reap();
        } else if (received_signal_) {  // a second Ctrl-C: no more waiting
          signal_running(SIGKILL);
          killed_ = true;
        } else {
          received_signal_ = sig;
          note("received " + signal_name(sig) + "; forwarding it to the workers");
          begin_stop(sig);
        }
      }
    }
  }
  if (stopping_) {
    // The workers are gone; take down anything they started in their process groups too.
    for (auto& w : workers_) ::kill(-w.outcome.pid, SIGKILL);
  }
  for (auto& w : workers_) {
    for (Stream* s : {&w.out, &w.err}) close_stream(w, *s);
    if (w.log_fd >= 0) ::close(w.log_fd);
    w.log_fd = -1;
  }
  if (received_signal_) return End::Interrupted;
  if (ft_ && root_ < 0) {
    // --fault-tolerant: the job succeeded when every member of the last epoch on this node finished well (the
    // lost ones left it); a member that failed after the last tick, or no member left at all, fails it.
    ft_tick();
    bool any_member = false;
    for (size_t i = 0; i < workers_.size(); ++i) {
      const auto m = ft_->current().member_of(workers_[i].outcome.rank);
      if (!m || m->incarnation != workers_[i].incarnation) continue;
      any_member = true;
      if (workers_[i].outcome.failed() && root_ < 0) root_ = static_cast<int>(i);
    }
    if (ft_->failed() && root_ < 0) root_ = 0;
    // No worker of this node is left in the job: this node's part failed (the job may go on elsewhere).
    for (size_t i = 0; i < workers_.size() && !any_member && root_ < 0; ++i)
      if (workers_[i].outcome.failed()) root_ = static_cast<int>(i);
  }
  if (root_ >= 0) return End::WorkerFailed;
  return stall_ ? End::Stalled : End::AllSucceeded;
}

void Supervisor::ft_tick() {
  FtAgent::Tick t;
  try {
    t = ft_->tick();
  } catch (const std::exception& e) {
    note(std::string("fault tolerance: the coordinator failed: ") + e.what() + "; stopping the job");
    if (root_ < 0) root_ = 0;
    begin_stop(SIGTERM);
    return;
  }
  if (t.changed) {
    note("membership epoch " + std::to_string(t.changed->epoch) + " (heartbeats at step " + std::to_string(t.changed->step) +
         "): " + t.changed->reason + (t.changed->failed ? "" : "; members " + t.changed->slot_list()));
  }
  for (const auto& m : t.removed) {
    const size_t local = static_cast<size_t>(m.slot - c_.node_rank * c_.nproc_per_node);
    Worker& w = workers_[local];
    if (w.incarnation != m.incarnation) continue;
    if (w.running) ::kill(-w.outcome.pid, SIGKILL);  // fenced: it was thrown out and must not come back
    if (replacements_left_ > 0 && !ft_->failed()) {
      --replacements_left_;
      replace_at_[local] = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(c_.replace_delay_s));
    }
  }
  if (ft_->failed()) {
    note("fault tolerance: " + ft_->current().reason);
    if (root_ < 0) {
      root_ = 0;
      for (size_t i = 0; i < workers_.size(); ++i)
        if (workers_[i].outcome.failed()) root_ = static_cast<int>(i);
    }
    begin_stop(SIGTERM);
    return;
  }
  for (size_t local = 0; local < replace_at_.size(); ++local) {
    if (!replace_at_[local] || Clock::now() < *replace_at_[local]) continue;
    if (workers_[local].running) continue;  // the fenced one is still being reaped
    replace_at_[local].reset();
    start_replacement(local);
  }
}

void Supervisor::start_replacement(size_t local) {
  Worker& old = workers_[local];
  const int incarnation = old.incarnation + 1;
  for (Stream* s : {&old.out, &old.err}) close_stream(old, *s);
  const WorkerOutcome kept = old.outcome;
  Worker& w = old;
  w.outcome = WorkerOutcome{};
  w.outcome.local_rank = kept.local_rank;
  w.outcome.rank = kept.rank;
  w.outcome.log_file = kept.log_file;
  w.out.lines = LineBuffer();
  w.err.lines = LineBuffer();
  w.shown_err = ShownStderr();
  w.incarnation = incarnation;
  if (!w.error_file.empty()) {
    std::error_code ec;
    std::filesystem::remove(w.error_file, ec);
  }
  if (!w.outcome.log_file.empty())
    w.log_fd = ::open(w.outcome.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  ++ft_replaced_;
  note("starting a replacement for rank " + std::to_string(w.outcome.rank) + " (incarnation " +
       std::to_string(incarnation) + "); it joins at the next step boundary");
  spawn(w, 0);
}

void Supervisor::make_flight_root() {
  if (!c_.flight_dir.empty()) {
    flight_root_ = c_.flight_dir;
  } else if (!c_.log_dir.empty()) {
    flight_root_ = c_.log_dir;  // LOG_DIR/attempt_<k>/flight, beside the logs
  } else {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ddprun-flight-XXXXXX").string();
    DDP_CHECK(::mkdtemp(tmpl.data()) != nullptr, "ddprun: cannot create a folder for the flight records in ",
              std::filesystem::temp_directory_path().string(), ": ", std::strerror(errno),
              "; give one with --flight-dir");
    flight_root_ = tmpl;
    flight_root_temporary_ = true;
  }
}

std::string Supervisor::flight_record_of(const Worker& w) const {
  return flight_dir_ + "/flight.rank" + std::to_string(w.outcome.rank) + ".json";
}

void Supervisor::stop_after_dumps() {
  // The ranks still running that run ddp.cpp (their progress page is attached: they answer SIGUSR1) write
  // their records first; a program that does not would die of SIGUSR1, so it is not sent one.
  dump_asked_.assign(workers_.size(), false);
  dumps_before_.assign(workers_.size(), 0);
  bool asked = false;
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = workers_[i];
    if (!w.running || !watchdog_ || !watchdog_->attached(static_cast<int>(i))) continue;
    if (process_stopped(w.outcome.pid)) {
      note("rank " + std::to_string(w.outcome.rank) + " (pid " + std::to_string(w.outcome.pid) +
           ") is stopped (SIGSTOP or a debugger): it cannot write a flight record");
      continue;
    }
    dumps_before_[i] = watchdog_->dumps(static_cast<int>(i));
    ::kill(w.outcome.pid, SIGUSR1);
    dump_asked_[i] = true;
    asked = true;
  }
  if (!asked) {
    begin_stop(SIGTERM);
    return;
  }
  dumping_ = true;
  dump_deadline_ = Clock::now() + kDumpWait;
}

// A worker answered when its progress page counts one more request answered than before it was asked: it
// has written the records of all its groups (flight.rank<R>.json and every flight.rank<R>.<group>.json), or
// had none to write (the recorder off). Waiting for one file instead lost a second group's record (issue 36).
bool Supervisor::dumps_done() const {
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!dump_asked_[i] || !workers_[i].running) continue;
    if (watchdog_->dumps(static_cast<int>(i)) <= dumps_before_[i]) return false;
  }
  return true;
}

void Supervisor::check_stall() {
  if (!watchdog_ || !(watchdog_->limit_s() > 0)) return;
  std::vector<bool> running;
  for (auto& w : workers_) running.push_back(w.running);
  auto st = watchdog_->check(steady_now_ns(), running);
  if (!st) return;
  stall_ = st;
  char waited[32];
  std::snprintf(waited, sizeof(waited), "%.1f", st->waited_s);
  note("stall watchdog: rank " + std::to_string(workers_[static_cast<size_t>(st->local_rank)].outcome.rank) +
       " has waited " + waited + " s on " + std::to_string(st->pending) +
       " collective(s) with no progress (--stall-timeout " + std::to_string(static_cast<int64_t>(c_.stall_timeout_s)) +
       " s); asking every rank for its flight record, then stopping the job");
  stop_after_dumps();
}

std::string Supervisor::flight_note() const {
  std::vector<int> have, missing;
  for (const auto& w : workers_) {
    std::error_code ec;
    (std::filesystem::exists(flight_record_of(w), ec) ? have : missing).push_back(w.outcome.rank);
  }
  // Every group's file (a second group's flight.rank<R>.<group>.json too).
  size_t files = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(flight_dir_, ec)) {
    const std::string name = e.path().filename().string();
    files += name.rfind("flight.rank", 0) == 0 && e.path().extension() == ".json";
  }
  if (have.empty()) {
    const auto entries = inherited_.find("DDP_FLIGHT_RECORDER_ENTRIES");
    if (entries != inherited_.end() && entries->second == "0")
      return "ddprun: no flight records: DDP_FLIGHT_RECORDER_ENTRIES=0 turned the recorder off; unset it to "
             "have every rank's last collectives in the folder next time\n";
    return "";
  }
  auto list = [](const std::vector<int>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s;
  };
  std::string out = "ddprun: flight records of rank" + std::string(have.size() > 1 ? "s " : " ") + list(have);
  if (!missing.empty()) out += " (none from rank" + std::string(missing.size() > 1 ? "s " : " ") + list(missing) + ")";
  out += " in " + flight_dir_;
  if (files > have.size()) out += " (" + std::to_string(files) + " files: one per group of each rank)";
  out += "; `ddp_flight " + flight_dir_ + "` says which rank stopped and where\n";
  return out;
}

int Supervisor::run() {
  install_signals();
  if (std::string n = thread_limit_note(c_, inherited_); !n.empty()) note(n);
  if (c_.log_dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ddprun-errors-XXXXXX").string();
    if (::mkdtemp(tmpl.data())) error_dir_ = tmpl;
  }
  make_flight_root();
  if (c_.fault_tolerant) {
    ft_ = std::make_unique<FtAgent>(c_);
    replacements_left_ = c_.replacements;
    replace_at_.assign(static_cast<size_t>(c_.nproc_per_node), std::nullopt);
  }
  for (int attempt = 0;; ++attempt) {
    start_attempt(attempt);
    End end = monitor();
    remove_worker_segments();
    if (ft_ && (ft_->changes() > 0 || !ft_lost_.empty()))
      note("fault tolerance: " + std::to_string(ft_->changes()) + " membership change(s), " +
           std::to_string(ft_lost_.size()) + " worker(s) lost, " + std::to_string(ft_replaced_) +
           " replacement(s) started; final world " + std::to_string(ft_->current().size()) + " (ranks " +
           ft_->current().slot_list() + ")");
    if (end == End::AllSucceeded) {
      watchdog_.reset();
      if (flight_root_temporary_) {
        std::error_code ec;
        std::filesystem::remove_all(flight_root_, ec);
      }
      return 0;
    }
    if (end == End::Interrupted) {
      write_all(STDERR_FILENO, flight_note());
      return 128 + received_signal_;
    }
    std::vector<WorkerOutcome> outcomes;
    for (auto& w : workers_) outcomes.push_back(w.outcome);
    const bool stalled = end == End::Stalled;
    const size_t root = static_cast<size_t>(stalled ? stall_->local_rank : root_);
    if (attempt < c_.max_restarts) {
      note("rank " + std::to_string(outcomes[root].rank) + " " +
           (stalled ? "stalled (stall watchdog)" : "ended with " + outcomes[root].describe()) +
           "; restarting all workers (restart " + std::to_string(attempt + 1) + " of " +
           std::to_string(c_.max_restarts) + ")");
      continue;
    }
    if (stalled) {
      write_all(STDERR_FILENO, stall_summary(outcomes, root, stall_->waited_s, c_.stall_timeout_s, attempt,
                                             c_.max_restarts));
      write_all(STDERR_FILENO, flight_note());
      return kStallExitCode;
    }
    write_all(STDERR_FILENO, failure_summary(outcomes, root, attempt, c_.max_restarts));
    write_all(STDERR_FILENO, flight_note());
    return outcomes[root].shell_code();
  }
}

}  // namespace

int run_workers(const LaunchConfig& config) {
  Supervisor s(config);
  return s.run();
}

}  // namespace ddp::launch

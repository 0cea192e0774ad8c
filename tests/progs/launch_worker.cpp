// launch_worker.cpp - a configurable worker for the ddprun tests (tests/launch/): prints its pid, then
// whatever the flags ask for (local rank, environment, many lines), and fails, crashes or sleeps on demand
// (when a --go-file appears, so a test can exit several ranks at once);
// --shm-segment leaves a shared-memory segment named like the shm group's in /dev/shm, as a crash does.
// It parses its flags with the project's cli parser, so legacy --local-rank / --local_rank arguments from
// ddprun go through the same code every program uses.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "runtime/core/cli.h"
#include "runtime/distributed/shm/shm_segment.h"

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// Writes s with one write() per call, so tests see exactly the pieces this program emitted.
void emit(const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(STDOUT_FILENO, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// Marks this rank ready in sync_dir and waits (at most 30 s) until all `world` ranks are.
void barrier(const std::string& sync_dir, int rank, int world) {
  namespace fs = std::filesystem;
  std::FILE* f = std::fopen((sync_dir + "/ready_" + std::to_string(rank)).c_str(), "w");
  if (f) std::fclose(f);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    int ready = 0;
    for (int r = 0; r < world; ++r) ready += fs::exists(sync_dir + "/ready_" + std::to_string(r)) ? 1 : 0;
    if (ready == world) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool print_local_rank = false, print_env = false, ignore_term = false, shm_segment = false;
  int lines = 0, exit_rank = -1, exit_code = 0, kill_rank = -1, fail_attempts = 0, others_exit_code = -1;
  double sleep_s = 0;
  std::string sync_dir, go_file;
  ddp::cli::Parser p("launch_worker", "helper program for the ddprun tests");
  p.add("print-local-rank", &print_local_rank, "print local_rank=N source=flag|env");
  p.add("print-env", &print_env, "print the launcher's variables as KEY=VALUE lines");
  p.add("lines", &lines, "print this many long lines, each in two write() calls");
  p.add("exit-rank", &exit_rank, "this rank exits with --exit-code (after the barrier)");
  p.add("exit-code", &exit_code, "exit code for --exit-rank");
  p.add("kill-rank", &kill_rank, "this rank kills itself with SIGKILL (after the barrier)");
  p.add("fail-attempts", &fail_attempts, "rank 0 exits 1 while TORCHELASTIC_RESTART_COUNT < this");
  p.add("sleep", &sleep_s, "seconds the other ranks sleep at the end");
  p.add("shm-segment", &shm_segment,
        "create a shm-group-style segment and never unlink it (before the barrier)");
  p.add("ignore-term", &ignore_term, "ignore SIGTERM (to test the SIGKILL after the grace period)");
  p.add("sync-dir", &sync_dir,
        "directory for the start barrier: all ranks print their pid before anyone fails");
  p.add("go-file", &go_file, "after the barrier, wait (at most 30 s) until this file exists");
  p.add("others-exit-code", &others_exit_code,
        "the ranks other than --exit-rank exit with this code (instead of sleeping)");
  try {
    p.parse(argc, argv);
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  if (ignore_term) std::signal(SIGTERM, SIG_IGN);
  const int rank = env_int("RANK", 0), world = env_int("WORLD_SIZE", 1);
  const int attempt = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  emit("pid=" + std::to_string(::getpid()) + " rank=" + std::to_string(rank) +
       " restart_count=" + std::to_string(attempt) + "\n");
  if (print_local_rank)
    emit("local_rank=" + std::to_string(p.local_rank()) +
         " source=" + (p.given("local-rank") ? "flag" : "env") + "\n");
  if (print_env) {
    for (const char* var :
         {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
          "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
          "DDP_RUN_TOKEN", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
      const char* v = std::getenv(var);
      emit(std::string(var) + "=" + (v ? v : "<unset>") + "\n");
    }
  }
  const std::string payload(80, 'x');
  for (int i = 0; i < lines; ++i) {
    std::string line =
        "line " + std::to_string(i) + " of rank " + std::to_string(rank) + " " + payload + "\n";
    emit(line.substr(0, line.size() / 2));  // half a line, then the rest: the launcher must join them
    emit(line.substr(line.size() / 2));
  }
  if (shm_segment) {
    // Never destroyed: the name stays in /dev/shm whatever way this process ends.
    new ddp::dist::shm::Segment(ddp::dist::shm::Segment::create(
        ddp::dist::shm::segment_name(ddp::dist::shm::random_run_id(), std::to_string(rank)), 4096));
    emit("shm segment created\n");
  }
  if (!sync_dir.empty()) barrier(sync_dir, rank, world);
  if (!go_file.empty()) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!std::filesystem::exists(go_file) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (rank == 0 && attempt < fail_attempts) return 1;
  if (rank == kill_rank) ::kill(::getpid(), SIGKILL);
  if (rank == exit_rank) return exit_code;
  if (others_exit_code >= 0) return others_exit_code;
  if (sleep_s > 0) {
    // sleep in slices so an ignored SIGTERM cannot end the sleep early
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(sleep_s);
    while (std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

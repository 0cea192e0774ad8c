// test_ddprun.cpp - end-to-end tests of the ddprun binary with testprog_launch_worker: failure propagation
// and cleanup, signals, local-rank spellings, output prefixing, restarts, environment, flags.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "runtime/distributed/shm/shm_segment.h"
#include "runtime/distributed/socket_io.h"
#include "tests/support/run_process.h"

namespace ddp::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) lines.push_back(l);
  return lines;
}

// pid of each rank, from the "[rank R] pid=P rank=R ..." lines the worker prints first.
std::map<int, pid_t> worker_pids(const std::string& out) {
  std::map<int, pid_t> pids;
  std::regex re(R"(^\[rank (\d+)\] pid=(\d+) rank=(\d+))");
  for (auto& l : lines_of(out)) {
    std::smatch m;
    if (std::regex_search(l, m, re)) pids[std::stoi(m[1])] = static_cast<pid_t>(std::stol(m[2]));
  }
  return pids;
}

// The summary row marked as root cause.
std::string root_cause_row(const std::string& err) {
  for (auto& l : lines_of(err))
    if (l.find("<- root cause") != std::string::npos) return l;
  return "";
}

// A fresh, empty directory for one test.
std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("ddp_launch_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// Waits (at most 10 s) until every pid has vanished.
bool all_gone(const std::map<int, pid_t>& pids) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    bool gone = true;
    for (auto& [rank, pid] : pids) gone = gone && process_gone(pid);
    if (gone) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ProcessOptions clean_env() {
  ProcessOptions o;
  o.unset_env = {"LOCAL_RANK",          "RANK", "WORLD_SIZE", "DDP_RUN_TOKEN", "OMP_NUM_THREADS",
                 "OPENBLAS_NUM_THREADS"};
  o.timeout_s = 60;
  return o;
}

TEST(Ddprun, FailingRankStopsTheOthersAndIsTheRootCause) {
  std::string sync = temp_dir("fail");
  auto r = run_process({ddprun_path(), "--nproc-per-node", "3", "--grace-period", "10", launch_worker_path(),
                        "--sync-dir", sync, "--exit-rank", "1", "--exit-code", "3", "--sleep", "120"},
                       clean_env());
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 3) << r.err;
  auto pids = worker_pids(r.out);
  ASSERT_EQ(pids.size(), 3u) << r.out;
  EXPECT_TRUE(all_gone(pids)) << "sleeping ranks survived the failure";
  std::string row = root_cause_row(r.err);
  EXPECT_EQ(row.rfind("  1 ", 0), 0u) << r.err;  // the table's rank column
  EXPECT_NE(row.find("exit code 3"), std::string::npos) << r.err;
  EXPECT_NE(row.find(std::to_string(pids[1])), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SIGTERM"), std::string::npos) << "the sleepers were stopped with SIGTERM:\n" << r.err;
  fs::remove_all(sync);
}

TEST(Ddprun, WorkersIgnoringSigtermGetSigkillAfterTheGracePeriod) {
  std::string sync = temp_dir("grace");
  auto r = run_process(
      {ddprun_path(), "--nproc_per_node=2", "--grace_period=0.2", launch_worker_path(), "--sync-dir", sync,
       "--exit-rank", "0", "--exit-code", "5", "--sleep", "120", "--ignore-term"},
      clean_env());
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 5) << r.err;
  auto pids = worker_pids(r.out);
  ASSERT_EQ(pids.size(), 2u) << r.out;
  EXPECT_TRUE(all_gone(pids));
  bool rank1_killed = false;
  for (auto& l : lines_of(r.err))
    if (l.rfind("  1 ", 0) == 0 && l.find("SIGKILL") != std::string::npos) rank1_killed = true;
  EXPECT_TRUE(rank1_killed) << r.err;
  fs::remove_all(sync);
}

TEST(Ddprun, RankKilledBySigkillGives137AndTheSignalName) {
  std::string sync = temp_dir("kill");
  auto r = run_process({ddprun_path(), "--nproc-per-node", "2", launch_worker_path(), "--sync-dir", sync,
                        "--kill-rank", "1", "--sleep", "120"},
                       clean_env());
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
  std::string row = root_cause_row(r.err);
  EXPECT_EQ(row.rfind("  1 ", 0), 0u) << r.err;
  EXPECT_NE(row.find("SIGKILL"), std::string::npos) << r.err;
  EXPECT_TRUE(all_gone(worker_pids(r.out)));
  fs::remove_all(sync);
}

// Both ranks exit with codes of their own at once, while ddprun is stopped (SIGSTOP), so it finds both
// already exited when it looks: the table marks one as the root cause and the other as failed too - never as
// "stopped by ddprun", which sent it nothing - and counts both.
TEST(Ddprun, RanksThatExitedOnTheirOwnAreNotStoppedByDdprun) {
  std::string sync = temp_dir("own_exit");
  const std::string go = sync + "/go";
  ProcessOptions o = clean_env();
  int phase = 0;
  std::map<int, pid_t> pids;
  o.on_progress = [&](pid_t ddprun, const std::string& out, const std::string&) {
    if (phase == 0 && worker_pids(out).size() == 2 && fs::exists(sync + "/ready_0") &&
        fs::exists(sync + "/ready_1")) {
      pids = worker_pids(out);
      ::kill(ddprun, SIGSTOP);
      std::ofstream(go) << "go\n";
      phase = 1;
    } else if (phase == 1 && process_gone(pids[0]) && process_gone(pids[1])) {  // both zombies now
      ::kill(ddprun, SIGCONT);
      phase = 2;
    }
  };
  auto r = run_process({ddprun_path(), "--nproc-per-node", "2", launch_worker_path(), "--sync-dir", sync,
                        "--go-file", go, "--exit-rank", "0", "--exit-code", "3", "--others-exit-code", "1"},
                       o);
  ASSERT_EQ(phase, 2) << r.err;
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_TRUE(r.exit_code == 3 || r.exit_code == 1) << r.err;  // the root cause is the one reaped first
  EXPECT_EQ(r.err.find("stopped by ddprun"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("2 of 2 workers failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(failed too, on its own)"), std::string::npos) << r.err;
  fs::remove_all(sync);
}

// A port in use: rank 0's store cannot listen, and the message points at what ddprun accepts for a free port.
TEST(Ddprun, APortClashPointsAtAFreePortDdprunAccepts) {
  auto taken = dist::net::listen_on("127.0.0.1", 0);
  const int port = dist::net::local_port(taken);
  const std::string train = std::string(DDP_BIN_DIR) + "/train";
  auto r = run_process({ddprun_path(), "--nproc-per-node", "2", "--master-port", std::to_string(port), train,
                        "--model", "mlp", "--data", "synthetic", "--hidden", "8", "--synthetic-samples", "64",
                        "--batch-size", "8", "--steps", "1"},
                       clean_env());
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ddprun --standalone, or --master-port 0"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("or 0 for a free one"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(".cpp:"), std::string::npos) << "a source location leaked:\n" << r.err;
  // What it suggests works: the same job with --master-port 0 trains.
  auto ok = run_process({ddprun_path(),
                         "--nproc-per-node",
                         "2",
                         "--master-port",
                         "0",
                         train,
                         "--model",
                         "mlp",
                         "--data",
                         "synthetic",
                         "--hidden",
                         "8",
                         "--synthetic-samples",
                         "64",
                         "--batch-size",
                         "8",
                         "--steps",
                         "1",
                         "--eval-batches",
                         "1"},
                        clean_env());
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// Our shared-memory segments in /dev/shm created by any of `pids`.
std::vector<std::string> segments_of(const std::map<int, pid_t>& pids) {
  std::vector<std::string> out;
  for (const auto& n : dist::shm::list_segments())
    for (auto& [rank, pid] : pids)
      if (n.rfind(dist::shm::segment_prefix_of(pid), 0) == 0) out.push_back(n);
  return out;
}

// Every worker leaves a segment (as one killed while setting up a shm group does); rank 1 is SIGKILLed, rank
// 0 gets SIGTERM from ddprun. Once ddprun returns, /dev/shm holds nothing of the job's - also after a clean
// exit.
TEST(Ddprun, RemovesTheSharedMemorySegmentsItsWorkersLeft) {
  for (const char* how : {"kill", "exit"}) {
    SCOPED_TRACE(how);
    std::string sync = temp_dir(std::string("shm_") + how);
    std::vector<std::string> cmd{ddprun_path(), "--nproc-per-node", "2", launch_worker_path(), "--sync-dir",
                                 sync,          "--shm-segment"};
    if (std::string(how) == "kill") {
      for (const char* a : {"--kill-rank", "1", "--sleep", "120"}) cmd.push_back(a);
    }
    auto r = run_process(cmd, clean_env());
    ASSERT_FALSE(r.timed_out) << r.err;
    EXPECT_EQ(r.exit_code, std::string(how) == "kill" ? 128 + SIGKILL : 0) << r.err;
    auto pids = worker_pids(r.out);
    ASSERT_EQ(pids.size(), 2u) << r.out;
    EXPECT_NE(r.out.find("shm segment created"), std::string::npos) << r.out;
    EXPECT_EQ(segments_of(pids), std::vector<std::string>{}) << r.err;
    EXPECT_NE(r.err.find("removed 2 shared-memory segment(s)"), std::string::npos) << r.err;
    fs::remove_all(sync);
  }
}

// Each spelling reaches the worker's parser: env only, the dash argument, the underscore argument.
TEST(Ddprun, LocalRankReachesTheWorkerInEverySpelling) {
  struct Case {
    std::vector<std::string> flags;
    std::string source;
  };
  for (const Case& c :
       {Case{{}, "env"}, Case{{"--local-rank-arg"}, "flag"}, Case{{"--local_rank_arg=underscore"}, "flag"},
        Case{{"--local-rank-arg=dash"}, "flag"}}) {
    std::vector<std::string> argv = {ddprun_path(), "--nproc-per-node", "2"};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    argv.insert(argv.end(), {launch_worker_path(), "--print-local-rank"});
    auto r = run_process(argv, clean_env());
    ASSERT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    for (int rank : {0, 1}) {
      std::string want = "[rank " + std::to_string(rank) + "] local_rank=" + std::to_string(rank) +
                         " source=" + c.source + "\n";
      EXPECT_NE(r.out.find(want), std::string::npos)
          << "flags: " << (c.flags.empty() ? "" : c.flags[0]) << "\n"
          << r.out << r.err;
    }
  }
}

// Two ranks each print many lines in two halves; every console line must be one whole, prefixed line,
// and each rank's lines must arrive complete and in order.
TEST(Ddprun, OutputIsPrefixedWholeLines) {
  const int kLines = 3000;
  auto r = run_process(
      {ddprun_path(), "--nproc-per-node", "2", launch_worker_path(), "--lines", std::to_string(kLines)},
      clean_env());
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::regex line_re(R"(^\[rank (\d)\] line (\d+) of rank (\d) x{80}$)");
  std::map<int, int> next;
  int other = 0;
  for (auto& l : lines_of(r.out)) {
    std::smatch m;
    if (l.find(" pid=") != std::string::npos) continue;
    if (!std::regex_match(l, m, line_re)) {
      ++other;
      ADD_FAILURE() << "mangled line: " << l;
      if (other > 5) break;
      continue;
    }
    int prefix_rank = std::stoi(m[1]), number = std::stoi(m[2]), body_rank = std::stoi(m[3]);
    EXPECT_EQ(prefix_rank, body_rank);
    EXPECT_EQ(number, next[prefix_rank]) << "rank " << prefix_rank << " out of order";
    next[prefix_rank] = number + 1;
  }
  EXPECT_EQ(next[0], kLines);
  EXPECT_EQ(next[1], kLines);
}

TEST(Ddprun, MaxRestartsRestartsOnceWithIncrementedCount) {
  auto r = run_process({ddprun_path(), "--nproc-per-node", "2", "--max-restarts", "1", launch_worker_path(),
                        "--fail-attempts", "1"},
                       clean_env());
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 0] pid="), std::string::npos);
  EXPECT_NE(r.out.find("rank=0 restart_count=0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank=0 restart_count=1"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("restarting all workers (restart 1 of 1)"), std::string::npos) << r.err;

  // A rank that always fails: two attempts, then the summary and its exit code.
  auto always = run_process({ddprun_path(), "--nproc-per-node", "2", "--max-restarts", "1",
                             launch_worker_path(), "--fail-attempts", "100"},
                            clean_env());
  ASSERT_FALSE(always.timed_out);
  EXPECT_EQ(always.exit_code, 1) << always.err;
  int attempts = 0;
  for (auto& l : lines_of(always.out))
    attempts += l.find("] pid=") != std::string::npos && l.find(" rank=0 ") != std::string::npos;
  EXPECT_EQ(attempts, 2) << always.out;
  EXPECT_NE(always.err.find("attempt 2 of 2"), std::string::npos) << always.err;
}

TEST(Ddprun, SetsTheTorchrunEnvironment) {
  ProcessOptions o = clean_env();
  o.set_env["DDP_RUN_TOKEN"] = "0123456789abcdef0123456789abcdef";
  auto r = run_process(
      {ddprun_path(), "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1", "--master-addr",
       "10.1.2.3", "--master-port", "29555", "--run-id", "job7", launch_worker_path(), "--print-env"},
      o);
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int local : {0, 1}) {
    int rank = 2 + local;
    std::map<std::string, std::string> want = {{"RANK", std::to_string(rank)},
                                               {"LOCAL_RANK", std::to_string(local)},
                                               {"WORLD_SIZE", "4"},
                                               {"LOCAL_WORLD_SIZE", "2"},
                                               {"GROUP_RANK", "1"},
                                               {"ROLE_RANK", std::to_string(rank)},
                                               {"MASTER_ADDR", "10.1.2.3"},
                                               {"MASTER_PORT", "29555"},
                                               {"TORCHELASTIC_RESTART_COUNT", "0"},
                                               {"TORCHELASTIC_MAX_RESTARTS", "0"},
                                               {"TORCHELASTIC_RUN_ID", "job7"},
                                               {"DDP_RUN_TOKEN", "0123456789abcdef0123456789abcdef"},
                                               {"OMP_NUM_THREADS", "1"},
                                               {"OPENBLAS_NUM_THREADS", "1"}};
    for (auto& [k, v] : want) {
      std::string line = "[rank " + std::to_string(rank) + "] " + k + "=" + v + "\n";
      EXPECT_NE(r.out.find(line), std::string::npos) << "missing " << line << r.out;
    }
  }
}

TEST(Ddprun, SingleNodeMakesOneRandomTokenAndStandalonePicksAPort) {
  auto r = run_process(
      {ddprun_path(), "--nproc-per-node", "2", "--standalone", launch_worker_path(), "--print-env"},
      clean_env());
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> tokens, ports;
  std::smatch m;
  for (auto& l : lines_of(r.out)) {
    if (std::regex_match(l, m, std::regex(R"(\[rank \d\] DDP_RUN_TOKEN=(.*))"))) tokens.insert(m[1]);
    if (std::regex_match(l, m, std::regex(R"(\[rank \d\] MASTER_PORT=(.*))"))) ports.insert(m[1]);
  }
  ASSERT_EQ(tokens.size(), 1u) << r.out;
  EXPECT_TRUE(std::regex_match(*tokens.begin(), std::regex("[0-9a-f]{32}"))) << *tokens.begin();
  ASSERT_EQ(ports.size(), 1u);
  int port = std::stoi(*ports.begin());
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
}

TEST(Ddprun, MultiNodeWithoutTokenIsRefused) {
  auto r =
      run_process({ddprun_path(), "--nnodes", "2", "--node-rank", "0", launch_worker_path()}, clean_env());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("DDP_RUN_TOKEN"), std::string::npos) << r.err;
}

TEST(Ddprun, UnknownFlagSuggestsTheClosest) {
  auto r = run_process({ddprun_path(), "--nproc-per-nod", "2", launch_worker_path()}, clean_env());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown flag --nproc-per-nod; did you mean --nproc-per-node?"), std::string::npos)
      << r.err;
  auto r2 = run_process({ddprun_path(), "--max_restart=1", launch_worker_path()}, clean_env());
  EXPECT_EQ(r2.exit_code, 2);
  EXPECT_NE(r2.err.find("did you mean --max-restarts?"), std::string::npos) << r2.err;
}

TEST(Ddprun, MissingProgramIsAClearError) {
  auto r = run_process({ddprun_path(), "--nproc-per-node", "2", "no-such-program-ddp"}, clean_env());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("'no-such-program-ddp' not found in PATH"), std::string::npos) << r.err;
}

TEST(Ddprun, LogDirGetsEveryRankAndTeeZeroSilencesTheConsole) {
  std::string dir = temp_dir("logs");
  auto r = run_process({ddprun_path(), "--nproc-per-node", "2", "--log-dir", dir, "--tee", "0",
                        launch_worker_path(), "--lines", "5"},
                       clean_env());
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("[rank"), std::string::npos) << r.out;
  for (int rank : {0, 1}) {
    std::ifstream f(dir + "/attempt_0/rank_" + std::to_string(rank) + ".log");
    std::stringstream content;
    content << f.rdbuf();
    EXPECT_NE(content.str().find("line 4 of rank " + std::to_string(rank) + " x"), std::string::npos)
        << content.str();
    EXPECT_EQ(content.str().find("[rank"), std::string::npos) << "log files are not prefixed";
  }
  fs::remove_all(dir);
}

TEST(Ddprun, LocalRanksFilterShowsOnlyThoseRanks) {
  auto r = run_process({ddprun_path(), "--nproc-per-node", "3", "--local-ranks-filter", "1",
                        launch_worker_path(), "--lines", "3"},
                       clean_env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 1] line 2 of rank 1"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[rank 0]"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[rank 2]"), std::string::npos) << r.out;
}

// SIGTERM to ddprun reaches the workers; ddprun exits 128 + SIGTERM.
TEST(Ddprun, ForwardsSigtermToTheWorkers) {
  std::string sync = temp_dir("sigterm");
  ProcessOptions o = clean_env();
  bool sent = false;
  o.on_progress = [&](pid_t pid, const std::string& out, const std::string&) {
    if (!sent && worker_pids(out).size() == 2 && fs::exists(sync + "/ready_0") &&
        fs::exists(sync + "/ready_1")) {
      ::kill(pid, SIGTERM);
      sent = true;
    }
  };
  auto r = run_process(
      {ddprun_path(), "--nproc-per-node", "2", launch_worker_path(), "--sync-dir", sync, "--sleep", "120"},
      o);
  ASSERT_TRUE(sent);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_TRUE(all_gone(worker_pids(r.out)));
  fs::remove_all(sync);
}

// SIGKILL to ddprun: nothing can be forwarded, PR_SET_PDEATHSIG must take the workers down.
TEST(Ddprun, KilledLauncherLeavesNoOrphans) {
  std::string sync = temp_dir("orphans");
  ProcessOptions o = clean_env();
  bool sent = false;
  o.on_progress = [&](pid_t pid, const std::string& out, const std::string&) {
    if (!sent && worker_pids(out).size() == 2) {
      ::kill(pid, SIGKILL);  // only ddprun: the workers are in process groups of their own
      sent = true;
    }
  };
  auto r = run_process({ddprun_path(), "--nproc-per-node", "2", launch_worker_path(), "--sleep", "120"}, o);
  ASSERT_TRUE(sent);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  auto pids = worker_pids(r.out);
  ASSERT_EQ(pids.size(), 2u);
  EXPECT_TRUE(all_gone(pids)) << "workers outlived a SIGKILLed ddprun";
  fs::remove_all(sync);
}

}  // namespace
}  // namespace ddp::testing

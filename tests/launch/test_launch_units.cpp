// test_launch_units.cpp - the launcher's pure parts without starting processes: line splitting, the
// worker environment and arguments, flag parsing and resolution, the failure table.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "runtime/core/cli.h"
#include "runtime/core/device.h"
#include "runtime/launch/failure_summary.h"
#include "runtime/launch/host.h"
#include "runtime/launch/launch_config.h"
#include "runtime/launch/line_buffer.h"
#include "runtime/launch/stall_watchdog.h"
#include "runtime/launch/worker_env.h"

namespace ddp::launch {
namespace {

TEST(LineBuffer, JoinsPiecesAndSplitsAtNewlines) {
  LineBuffer b;
  std::vector<std::string> lines;
  b.feed("ab", 2, &lines);
  EXPECT_TRUE(lines.empty());
  b.feed("c\nde\n\nf", 7, &lines);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "abc\n");
  EXPECT_EQ(lines[1], "de\n");
  EXPECT_EQ(lines[2], "\n");
  std::string tail;
  ASSERT_TRUE(b.flush(&tail));
  EXPECT_EQ(tail, "f\n");
  EXPECT_FALSE(b.flush(&tail));
}

TEST(LineBuffer, CutsRunawayLines) {
  LineBuffer b(4);
  std::vector<std::string> lines;
  b.feed("abcdefghij\n", 11, &lines);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "abcd\n");
  EXPECT_EQ(lines[1], "efgh\n");
  EXPECT_EQ(lines[2], "ij\n");
}

// Runs parse_launch_config with a clean DDP_RUN_TOKEN.
std::optional<LaunchConfig> parse(std::vector<std::string> args, const char* token = nullptr) {
  if (token)
    ::setenv("DDP_RUN_TOKEN", token, 1);
  else
    ::unsetenv("DDP_RUN_TOKEN");
  auto c = parse_launch_config(args);
  ::unsetenv("DDP_RUN_TOKEN");
  return c;
}

TEST(LaunchConfig, BothSpellingsAndOptionsEndAtTheProgram) {
  auto c = parse({"--nproc_per_node=3", "--node-rank", "1", "--nnodes=2:2", "--max_restarts", "2", "true",
                  "--nproc-per-node", "9", "--x"},
                 "feedfeedfeedfeedfeedfeedfeedfeed");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->nproc_per_node, 3);
  EXPECT_EQ(c->nnodes, 2);
  EXPECT_EQ(c->node_rank, 1);
  EXPECT_EQ(c->max_restarts, 2);
  EXPECT_EQ(c->world_size(), 6);
  EXPECT_EQ(c->global_rank(2), 5);
  EXPECT_EQ(c->program, (std::vector<std::string>{"true", "--nproc-per-node", "9", "--x"}));
  EXPECT_EQ(c->program_path.substr(c->program_path.size() - 5), "/true");
  EXPECT_EQ(c->token, "feedfeedfeedfeedfeedfeedfeedfeed");
  EXPECT_EQ(c->run_id, "none");
}

TEST(LaunchConfig, NprocKeywords) {
  EXPECT_EQ(parse({"--nproc-per-node", "cpu", "true"})->nproc_per_node, cpu_core_count());
  int gpus = ddp::cuda_device_count();
  EXPECT_EQ(parse({"--nproc-per-node", "auto", "true"})->nproc_per_node, gpus > 0 ? gpus : 1);
  if (gpus == 0) {
    EXPECT_THROW(parse({"--nproc-per-node", "gpu", "true"}), cli::UsageError);
  }
  EXPECT_THROW(parse({"--nproc-per-node", "0", "true"}), cli::UsageError);
  EXPECT_THROW(parse({"--nproc-per-node", "many", "true"}), cli::UsageError);
}

TEST(LaunchConfig, BadValuesAreUsageErrors) {
  EXPECT_THROW(parse({"--nnodes", "1:4", "true"}), cli::UsageError);
  EXPECT_THROW(parse({"--node-rank", "1", "true"}), cli::UsageError);
  EXPECT_THROW(parse({"--master-port", "70000", "true"}), cli::UsageError);
  EXPECT_THROW(parse({"--tee", "4", "true"}), cli::UsageError);
  EXPECT_THROW(parse({"--nproc-per-node", "2", "--local-ranks-filter", "0,2", "true"}), cli::UsageError);
  EXPECT_THROW(parse({"--local-rank-arg=sideways", "true"}), cli::UsageError);
  EXPECT_THROW(parse({"--standalone", "--master-port", "1234", "true"}), cli::UsageError);
  EXPECT_THROW(parse({"--stall-timeout", "-1", "true"}), cli::UsageError);
  EXPECT_THROW(parse({"--stall-timeout", "soon", "true"}), cli::UsageError);
  EXPECT_THROW(parse({"--nproc-per-node", "2"}), cli::UsageError);  // no program
  EXPECT_FALSE(parse({"--help"}).has_value());
}

// What a port clash's message suggests works: --master-port 0 picks a free port on one node (as
// --standalone does); on several nodes, where the others could not know it, and below 0 it is refused.
TEST(LaunchConfig, MasterPortZeroPicksAFreePortOnOneNode) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto c = parse({"--master-port", "0", "true"});
    ASSERT_TRUE(c);
    EXPECT_GE(c->master_port, 1);
    EXPECT_LE(c->master_port, 65535);
    EXPECT_FALSE(c->standalone);
    EXPECT_EQ(c->run_id, "none");
  }
  EXPECT_EQ(parse({"--master-port", "1", "true"})->master_port, 1);
  EXPECT_EQ(parse({"--master-port", "65535", "true"})->master_port, 65535);
  const auto error_of = [](std::vector<std::string> args, const char* token = nullptr) {
    try {
      parse(std::move(args), token);
    } catch (const cli::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_NE(error_of({"--master-port", "0", "--nnodes", "2", "true"}, "feedfeedfeedfeedfeedfeedfeedfeed")
                .find("--master-port 0 picks a free port on this node, which the other nodes cannot know"),
            std::string::npos);
  EXPECT_NE(error_of({"--master-port", "-1", "true"}).find("--master-port -1 is not in [1, 65535] (or 0"),
            std::string::npos);
  EXPECT_NE(error_of({"--master-port", "65536", "true"}).find("is not in [1, 65535]"), std::string::npos);
}

TEST(LaunchConfig, StandaloneAndTokens) {
  auto c = parse({"--standalone", "true"});
  EXPECT_NE(c->run_id, "none");
  EXPECT_GT(c->master_port, 0);
  EXPECT_EQ(c->token.size(), 32u);
  EXPECT_NE(parse({"true"})->token, c->token) << "each run gets a fresh token";
  EXPECT_THROW(parse({"--nnodes", "2", "true"}), cli::UsageError);
}

TEST(WorkerEnv, RanksAndThreadLimits) {
  LaunchConfig c;
  c.nproc_per_node = 4;
  c.nnodes = 3;
  c.node_rank = 2;
  c.max_restarts = 5;
  c.run_id = "r";
  c.token = "t";
  auto env = worker_env_overrides(c, 3, 2, {});
  EXPECT_EQ(env["RANK"], "11");
  EXPECT_EQ(env["LOCAL_RANK"], "3");
  EXPECT_EQ(env["WORLD_SIZE"], "12");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(env["GROUP_RANK"], "2");
  EXPECT_EQ(env["ROLE_RANK"], "11");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "5");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
  // A value the user exported is kept.
  auto user = worker_env_overrides(c, 0, 0, {{"OMP_NUM_THREADS", "8"}});
  EXPECT_EQ(user.count("OMP_NUM_THREADS"), 0u);
  EXPECT_EQ(user["OPENBLAS_NUM_THREADS"], "1");
  auto full = worker_environment(c, 0, 0, {{"OMP_NUM_THREADS", "8"}, {"RANK", "99"}});
  EXPECT_NE(std::find(full.begin(), full.end(), "OMP_NUM_THREADS=8"), full.end());
  EXPECT_NE(std::find(full.begin(), full.end(), "RANK=8"), full.end())
      << "ddprun's RANK replaces an inherited one";
  // One worker per node: no limits.
  c.nproc_per_node = 1;
  EXPECT_EQ(worker_env_overrides(c, 0, 0, {}).count("OMP_NUM_THREADS"), 0u);
  EXPECT_FALSE(limits_threads(c, {}));
}

TEST(WorkerEnv, LegacyLocalRankArgumentComesRightAfterTheProgram) {
  LaunchConfig c;
  c.program = {"prog", "--lr", "1", "--", "file"};
  EXPECT_EQ(worker_args(c, 1), c.program);
  c.local_rank_arg = LocalRankArg::Dash;
  EXPECT_EQ(worker_args(c, 1),
            (std::vector<std::string>{"prog", "--local-rank=1", "--lr", "1", "--", "file"}));
  c.local_rank_arg = LocalRankArg::Underscore;
  EXPECT_EQ(worker_args(c, 0)[1], "--local_rank=0");
}

TEST(FailureSummary, MarksTheRootCauseAndSignals) {
  std::vector<WorkerOutcome> w(3);
  for (int i = 0; i < 3; ++i) {
    w[i].rank = 4 + i;
    w[i].local_rank = i;
    w[i].pid = 1000 + i;
    w[i].exited = true;
    w[i].elapsed_s = 1.5;
  }
  w[0].signal = SIGTERM;
  w[0].signalled_by_launcher = true;
  w[1].signal = SIGSEGV;
  w[2].log_file = "/logs/attempt_0/rank_6.log";
  std::string s = failure_summary(w, 1, 0, 0);
  EXPECT_NE(s.find("SIGSEGV (signal 11)"), std::string::npos) << s;
  EXPECT_TRUE(
      std::regex_search(s, std::regex(R"(\n  5 +1 +1001 +SIGSEGV \(signal 11\) +1\.50s +- +<- root cause)")))
      << s;
  EXPECT_NE(s.find("(stopped by ddprun)"), std::string::npos) << s;
  EXPECT_NE(s.find("/logs/attempt_0/rank_6.log"), std::string::npos) << s;
  EXPECT_NE(s.find("ddprun exits with 139"), std::string::npos) << s;
  EXPECT_EQ(w[1].shell_code(), 128 + SIGSEGV);
  EXPECT_FALSE(w[2].failed());
}

// Only a worker that ddprun's signal ended reads "stopped by ddprun"; one that exited with a code of its own
// failed too, whether it ended before ddprun's SIGTERM came or after it (by handling it).
TEST(FailureSummary, AWorkerThatExitedWithItsOwnCodeWasNotStoppedByDdprun) {
  std::vector<WorkerOutcome> w(5);
  for (int i = 0; i < 5; ++i) {
    w[i].rank = i;
    w[i].local_rank = i;
    w[i].pid = 2000 + i;
    w[i].exited = true;
  }
  w[0].exit_code = 3;  // the root cause, whose error file holds bytes a terminal must not get raw
  w[0].error_message = "bad \x1b[2J\xff byte";
  w[1].exit_code = 1;  // exited before ddprun signalled it
  w[2].exit_code = 1;  // signalled, but exited with a code of its own
  w[2].signalled_by_launcher = true;
  w[3].signal = SIGTERM;  // ended by ddprun's signal
  w[3].signalled_by_launcher = true;
  w[4].exit_code = 0;  // had finished, successfully
  const std::string s = failure_summary(w, 0, 0, 0);
  const auto row = [&](int rank) {
    const std::string start = "\n  " + std::to_string(rank) + " ";
    const size_t b = s.find(start);
    return b == std::string::npos ? std::string() : s.substr(b + 1, s.find('\n', b + 1) - b - 1);
  };
  EXPECT_NE(row(0).find("<- root cause"), std::string::npos) << s;
  EXPECT_NE(row(1).find("exit code 1"), std::string::npos) << s;
  EXPECT_NE(row(1).find("(failed too, on its own)"), std::string::npos) << s;
  EXPECT_NE(row(2).find("(failed too, after ddprun's SIGTERM)"), std::string::npos) << s;
  EXPECT_NE(row(3).find("(stopped by ddprun)"), std::string::npos) << s;
  EXPECT_EQ(row(4).find("("), std::string::npos) << s;
  for (int r : {0, 1, 2, 4}) EXPECT_EQ(row(r).find("stopped by ddprun"), std::string::npos) << s;
  EXPECT_NE(s.find("3 of 5 workers failed"), std::string::npos) << s;
  EXPECT_NE(s.find("ddprun: rank 0 error: bad \\x1b[2J\\xff byte\n"), std::string::npos) << s;
  EXPECT_FALSE(w[1].stopped_by_launcher());
  EXPECT_FALSE(w[2].stopped_by_launcher());
  EXPECT_TRUE(w[3].stopped_by_launcher());
}

TEST(Host, SignalNamesAndRandomHex) {
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  std::string a = random_hex(16), b = random_hex(16);
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_THROW(find_program("surely-not-a-program-ddp"), ddp::Error);
}

}  // namespace
// Each one-node launch has its own DDP_JOB_ID (the store refuses ranks of another job); several nodes' ddpruns
// have nothing in common to derive one from, so none.
TEST(LaunchConfig, EachOneNodeLaunchGetsItsOwnJobId) {
  auto a = parse({"--master-port", "29511", "true"}, "sametoken");
  auto b = parse({"--master-port", "29511", "true"}, "sametoken");
  EXPECT_EQ(a->job_id.size(), 16u);
  EXPECT_NE(a->job_id, b->job_id) << "two launches with the same port and token must differ";
  EXPECT_EQ(worker_env_overrides(*a, 0, 0, {})["DDP_JOB_ID"], a->job_id);
  auto multi = parse({"--nnodes", "2", "--node-rank", "0", "true"}, "sametoken");
  EXPECT_EQ(multi->job_id, "");
  EXPECT_EQ(worker_env_overrides(*multi, 0, 0, {}).count("DDP_JOB_ID"), 0u);
}

}  // namespace ddp::launch

namespace ddp::launch {
namespace {

// The stall watchdog's flags, and where the workers' records go.
TEST(LaunchConfig, StallTimeoutAndFlightDir) {
  unsetenv("DDP_FLIGHT_RECORDER_DIR");
  auto c = parse({"true"});
  EXPECT_EQ(c->stall_timeout_s, 600.0);
  EXPECT_EQ(c->flight_dir, "");  // ddprun makes a temporary one
  c = parse({"--stall-timeout", "0", "--flight-dir", "/tmp/f", "true"});
  EXPECT_EQ(c->stall_timeout_s, 0.0);
  EXPECT_EQ(c->flight_dir, "/tmp/f");
  setenv("DDP_FLIGHT_RECORDER_DIR", "/tmp/from-env", 1);
  EXPECT_EQ(parse({"true"})->flight_dir, "/tmp/from-env");
  EXPECT_EQ(parse({"--flight-dir", "/tmp/f", "true"})->flight_dir, "/tmp/f");
  unsetenv("DDP_FLIGHT_RECORDER_DIR");
  std::map<std::string, std::string> none;
  auto env = worker_environment(*c, 0, 0, none, "", "/tmp/f/attempt_0", "/tmp/f/progress.rank0");
  EXPECT_NE(std::find(env.begin(), env.end(), "DDP_FLIGHT_RECORDER_DIR=/tmp/f/attempt_0"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), "DDP_FLIGHT_PROGRESS_FILE=/tmp/f/progress.rank0"), env.end());
}

// The stall rule on pages written by hand: only a live, attached worker with a collective pending and no
// transition for longer than the limit stalls; the one that waited longest is named; limit 0 never stalls.
TEST(StallWatchdog, OnlyAPendingCollectiveWithNoProgressPastTheLimitStalls) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ddp_stall_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  StallWatchdog w(dir.string(), {4, 5, 6}, 2.0);
  const int64_t s = 1'000'000'000;
  const std::vector<bool> all{true, true, true};
  EXPECT_FALSE(w.check(100 * s, all));  // nobody attached
  EXPECT_EQ(w.page_path(1), (dir / "progress.rank5").string());
  // Worker 1 attaches (as a rank's recorder does) and issues a collective at t = 10 s.
  dist::flight_progress_attach(w.page_path(1));
  EXPECT_TRUE(w.attached(1));
  EXPECT_FALSE(w.attached(0));
  dist::flight_progress_issued(10 * s);
  EXPECT_FALSE(w.check(12 * s, all));  // 2 s: not past the limit
  auto st = w.check(13 * s, all);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->local_rank, 1);
  EXPECT_EQ(st->pending, 1u);
  EXPECT_NEAR(st->waited_s, 3.0, 1e-9);
  EXPECT_FALSE(w.check(13 * s, {true, false, true}));  // it exited
  dist::flight_progress_ended(14 * s);
  EXPECT_FALSE(w.check(100 * s, all));  // nothing pending: computing, however long
  dist::flight_progress_issued(20 * s);
  dist::flight_progress_changed(21 * s);  // started: progress
  EXPECT_FALSE(w.check(22 * s, all));
  EXPECT_TRUE(w.check(24 * s, all));
  StallWatchdog off(dir.string(), {9}, 0.0);
  EXPECT_FALSE(off.check(1000 * s, {true}));
  w.reset(1);
  EXPECT_FALSE(w.attached(1));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ddp::launch

// test_launch_hardening.cpp - ddprun against careless input and the messages it prints (issue 13/17): an
// implausible worker count is refused unless asked for, the thread-limit note names what it really sets, and
// a failing worker's message reaches ddprun's failure table through TORCHELASTIC_ERROR_FILE in the JSON shape
// torchrun reads.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/core/cli.h"
#include "runtime/launch/error_file.h"
#include "runtime/launch/failure_summary.h"
#include "runtime/launch/host.h"
#include "runtime/launch/launch_config.h"
#include "runtime/launch/worker_env.h"
#include "tests/support/run_process.h"

namespace ddp::launch {
namespace {

namespace fs = std::filesystem;

std::string usage_error_of(const std::vector<std::string>& args) {
  ::setenv("DDP_RUN_TOKEN", "feedfeedfeedfeedfeedfeedfeedfeed", 1);
  try {
    parse_launch_config(args);
  } catch (const cli::UsageError& e) {
    ::unsetenv("DDP_RUN_TOKEN");
    return e.what();
  }
  ::unsetenv("DDP_RUN_TOKEN");
  return "(no error)";
}

TEST(LaunchHardening, ImplausibleWorkerCountsAreRefusedUnlessAskedFor) {
  const int cap = max_plausible_workers(cpu_core_count(), 0);
  EXPECT_GE(cap, 8);
  std::string err = usage_error_of({"--nproc-per-node", "99999", "true"});
  EXPECT_NE(err.find("--nproc-per-node 99999"), std::string::npos) << err;
  EXPECT_NE(err.find("at most " + std::to_string(cap)), std::string::npos) << err;
  EXPECT_NE(err.find("--allow-many-workers"), std::string::npos) << err;
  EXPECT_EQ(usage_error_of({"--nproc-per-node", std::to_string(cap), "true"}), "(no error)");
  EXPECT_EQ(usage_error_of({"--allow-many-workers", "--nproc-per-node", "99999", "true"}), "(no error)");
  EXPECT_EQ(max_plausible_workers(2, 16), 16);  // one per GPU is always plausible
}

TEST(LaunchHardening, DdprunRefusesQuicklyAndStartsNothing) {
  testing::ProcessOptions o;
  o.timeout_s = 30;
  auto t0 = std::chrono::steady_clock::now();
  auto r = testing::run_process({testing::ddprun_path(), "--nproc-per-node", "99999", "true"}, o);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--allow-many-workers"), std::string::npos) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));  // a bound against hanging
}

TEST(LaunchHardening, ThreadNoteNamesOnlyWhatItSets) {
  LaunchConfig c;
  c.nproc_per_node = 2;
  EXPECT_EQ(
      thread_limit_note(c, {}),
      "setting OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1 for the 2 workers (unset before); export them "
      "to choose another value");
  std::string n = thread_limit_note(c, {{"OPENBLAS_NUM_THREADS", "4"}});
  EXPECT_NE(n.find("setting OMP_NUM_THREADS=1 for the 2 workers"), std::string::npos) << n;
  EXPECT_EQ(n.find("OPENBLAS_NUM_THREADS=1"), std::string::npos) << n;
  EXPECT_NE(n.find("keeping OPENBLAS_NUM_THREADS=4"), std::string::npos) << n;
  EXPECT_EQ(thread_limit_note(c, {{"OPENBLAS_NUM_THREADS", "4"}, {"OMP_NUM_THREADS", "2"}}), "");
}

TEST(ErrorFile, HasTheShapeTorchrunReadsAndReadsBack) {
  fs::path dir = fs::temp_directory_path() / ("ddp_errfile_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "error.json").string();
  write_error_file(path, "train: error: \"quoted\"\nsecond line \xff");
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  // torchrun's agent: int(message.extraInfo.timestamp) must parse; it shows extraInfo.py_callstack.
  ASSERT_TRUE(j["message"].is_object());
  EXPECT_GT(std::stoll(j["message"]["extraInfo"]["timestamp"].get<std::string>()), 1'600'000'000);
  EXPECT_EQ(
      j["message"]["extraInfo"]["py_callstack"].get<std::string>().rfind("train: error: \"quoted\"\n", 0),
      0u);
  EXPECT_EQ(j["message"]["message"], j["message"]["extraInfo"]["py_callstack"]);
  EXPECT_EQ(read_error_file(path).value().rfind("train: error: \"quoted\"", 0), 0u);
  EXPECT_EQ(read_error_file((dir / "missing.json").string()), std::nullopt);
  // report_error_to_launcher follows TORCHELASTIC_ERROR_FILE and does nothing without it.
  ::setenv("TORCHELASTIC_ERROR_FILE", (dir / "env.json").c_str(), 1);
  EXPECT_TRUE(report_error_to_launcher("boom"));
  ::unsetenv("TORCHELASTIC_ERROR_FILE");
  EXPECT_FALSE(report_error_to_launcher("boom"));
  EXPECT_EQ(read_error_file((dir / "env.json").string()).value(), "boom");
  fs::remove_all(dir);
}

TEST(ErrorFile, DdprunsTableShowsTheWorkersMessage) {
  testing::ProcessOptions o;
  o.unset_env = {"LOCAL_RANK", "RANK", "WORLD_SIZE", "DDP_RUN_TOKEN", "TORCHELASTIC_ERROR_FILE"};
  o.timeout_s = 120;
  const std::string train = std::string(DDP_BIN_DIR) + "/train";
  auto r =
      testing::run_process({testing::ddprun_path(), "--standalone", "--nproc-per-node", "2", train, "--model",
                            "mlp", "--data", "fashion-mnist", "--data-path", "/nonexistent/ddp-test-data"},
                           o);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("<- root cause"), std::string::npos) << r.err;
  // The line comes from the error file (not the worker's prefixed stderr, which starts with "[rank N]").
  EXPECT_TRUE(r.err.find("\nddprun: rank 0 error: train: error:") != std::string::npos ||
              r.err.find("\nddprun: rank 1 error: train: error:") != std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("/nonexistent/ddp-test-data"), std::string::npos) << r.err;
}

TEST(FailureSummary, ShowsEachFailedWorkersErrorMessage) {
  std::vector<WorkerOutcome> w(2);
  for (int i = 0; i < 2; ++i) {
    w[i].rank = i;
    w[i].local_rank = i;
    w[i].exited = true;
  }
  w[1].exit_code = 1;
  w[1].error_message = "train: error: out of data";
  std::string s = failure_summary(w, 1, 0, 0);
  EXPECT_NE(s.find("ddprun: rank 1 error: train: error: out of data\n"), std::string::npos) << s;
}

}  // namespace
}  // namespace ddp::launch

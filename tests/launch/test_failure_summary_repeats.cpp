// test_failure_summary_repeats.cpp - ddprun's failure summary prints a worker's error message only where the
// console did not show it already: a message of several lines the worker printed on its stderr, shown as its
// "[rank N]" lines, is referred to (its first line and where the rest is); one it only wrote to its error
// file, one it printed differently, or one whose stderr the console did not show (--local-ranks-filter,
// --log-dir with --tee 1) is printed in full. The workers are
// small shell scripts that wait for each other and ignore SIGTERM, so every rank fails on its own.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/launch/failure_summary.h"
#include "tests/support/run_process.h"

namespace ddp::testing {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("ddp_summary_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

ProcessOptions clean_env() {
  ProcessOptions o;
  o.unset_env = {"LOCAL_RANK",          "RANK", "WORLD_SIZE", "DDP_RUN_TOKEN", "OMP_NUM_THREADS",
                 "OPENBLAS_NUM_THREADS"};
  o.timeout_s = 60;
  return o;
}

// How the worker script reports its error.
enum class Print { Same, Nothing, OnlyTheFirstLine };

// A worker that writes a two-line message "rank R broke\n  because of R" to its error file, prints it (or
// not, or only its first line) on stderr, waits until every rank has done so, and exits 3 (ignoring SIGTERM).
std::string script(const std::string& sync, int world, Print print) {
  std::ostringstream s;
  s << "trap '' TERM\n";  // ddprun's SIGTERM after the first exit must not stop a rank: each exits 3 itself
  s << "printf '{\"message\": \"rank %s broke\\\\n  because of %s\"}' \"$RANK\" \"$RANK\" > "
       "\"$TORCHELASTIC_ERROR_FILE\"\n";
  if (print == Print::Same) s << "printf 'rank %s broke\\n  because of %s\\n' \"$RANK\" \"$RANK\" >&2\n";
  if (print == Print::OnlyTheFirstLine) s << "printf 'rank %s broke\\n' \"$RANK\" >&2\n";
  s << "touch " << sync << "/done_$RANK\n"
    << "for i in $(seq 1000); do n=$(ls " << sync << " | grep -c done_); [ \"$n\" -ge " << world
    << " ] && break; sleep 0.01; done\n"
    << "exit 3\n";
  return s.str();
}

struct LaunchRun {
  ProcessResult r;
  std::string all;  // stdout and stderr
};

LaunchRun run_ddprun(int world, Print print, const std::vector<std::string>& flags, const std::string& name) {
  const std::string sync = temp_dir(name);
  std::vector<std::string> argv = {ddprun_path(), "--nproc-per-node", std::to_string(world)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  for (const char* a : {"bash", "-c"}) argv.push_back(a);
  argv.push_back(script(sync, world, print));
  LaunchRun out{run_process(argv, clean_env()), ""};
  out.all = out.r.out + out.r.err;
  fs::remove_all(sync);
  return out;
}

std::string referred(int rank) {
  const std::string r = std::to_string(rank);
  return "ddprun: rank " + r + " error (2 lines, printed above by rank " + r + "): rank " + r + " broke\n";
}
std::string in_full(int rank) {
  return "ddprun: rank " + std::to_string(rank) + " error: rank " + std::to_string(rank) +
         " broke\n  because of " + std::to_string(rank) + "\n";
}
}  // namespace

TEST(FailureSummaryRepeats, AMessageTheConsoleShowedIsReferredToNotRepeated) {
  for (int world : {1, 2, 3}) {
    LaunchRun x = run_ddprun(world, Print::Same, {}, "same" + std::to_string(world));
    ASSERT_FALSE(x.r.timed_out) << x.all;
    EXPECT_EQ(x.r.exit_code, 3) << x.all;
    for (int r = 0; r < world; ++r) {
      const std::string rank = std::to_string(r);
      EXPECT_EQ(count(x.all, "because of " + rank), 1u) << "world " << world << ":\n" << x.all;
      EXPECT_EQ(count(x.r.err, "[rank " + rank + "]   because of " + rank + "\n"), 1u) << x.all;
      EXPECT_EQ(count(x.r.err, referred(r)), 1u) << x.all;
    }
  }
}

TEST(FailureSummaryRepeats, AMessageOnlyInTheErrorFileOrPrintedDifferentlyIsPrintedInFull) {
  for (Print print : {Print::Nothing, Print::OnlyTheFirstLine}) {
    for (int world : {1, 2}) {
      LaunchRun x = run_ddprun(world, print, {}, "file" + std::to_string(world));
      ASSERT_FALSE(x.r.timed_out) << x.all;
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(count(x.r.err, in_full(r)), 1u) << x.all;
        EXPECT_EQ(count(x.all, "because of " + std::to_string(r)), 1u) << x.all;
        EXPECT_EQ(count(x.r.err, referred(r)), 0u) << x.all;
      }
    }
  }
}

TEST(FailureSummaryRepeats, AMessageTheConsoleDidNotShowIsPrintedInFull) {
  // Rank 1's output is filtered out: only the summary can show its message.
  LaunchRun filtered = run_ddprun(2, Print::Same, {"--local-ranks-filter", "0"}, "filter");
  ASSERT_FALSE(filtered.r.timed_out) << filtered.all;
  EXPECT_EQ(count(filtered.r.err, referred(0)), 1u) << filtered.all;
  EXPECT_EQ(count(filtered.r.err, in_full(1)), 1u) << filtered.all;
  EXPECT_EQ(count(filtered.all, "because of 1"), 1u) << filtered.all;
  // Stderr goes to the log files only: the summary prints both; the logs hold them too.
  const std::string logs = temp_dir("logs");
  LaunchRun teed = run_ddprun(2, Print::Same, {"--log-dir", logs, "--tee", "1"}, "tee");
  ASSERT_FALSE(teed.r.timed_out) << teed.all;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(count(teed.r.err, in_full(r)), 1u) << teed.all;
    std::ifstream log(logs + "/attempt_0/rank_" + std::to_string(r) + ".log");
    std::stringstream text;
    text << log.rdbuf();
    EXPECT_EQ(count(text.str(), "because of " + std::to_string(r)), 1u) << text.str();
  }
  fs::remove_all(logs);
}

// The formatting alone: a shown message of several lines is referred to (its first line, its line count, its
// first line escaped), an unshown one printed in full, a shown one-line message printed as it is.
TEST(FailureSummaryRepeats, TheTableRefersToAShownMessage) {
  std::vector<launch::WorkerOutcome> w(3);
  for (int i = 0; i < 3; ++i) {
    w[i].rank = i;
    w[i].local_rank = i;
    w[i].pid = 100 + i;
    w[i].exited = true;
    w[i].exit_code = 1;
    w[i].error_message = "train: error: rank " + std::to_string(i) + " broke\n  line two\n  line three";
  }
  w[0].error_message_shown = true;
  w[0].error_message[0] = '\x1b';
  w[2].error_message = "train: error: one line";
  w[2].error_message_shown = true;
  const std::string s = launch::failure_summary(w, 0, 0, 0);
  EXPECT_EQ(count(s, "line two"), 1u) << s;
  EXPECT_NE(
      s.find("ddprun: rank 0 error (3 lines, printed above by rank 0): \\x1brain: error: rank 0 broke\n"),
      std::string::npos)
      << s;
  EXPECT_NE(s.find("ddprun: rank 1 error: train: error: rank 1 broke\n  line two\n  line three\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("ddprun: rank 2 error: train: error: one line\n"), std::string::npos) << s;
}

}  // namespace ddp::testing

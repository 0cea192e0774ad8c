// test_user_messages.cpp - what users read: error lines without source locations (kept with DDP_DEBUG=INFO),
// one "[rank N]" prefix under ddprun, and the train program's errors for paths and --resume auto, a resume
// with nothing left to train, its --help for branchy.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "tests/support/run_process.h"

namespace ddp {
namespace {

std::string train_path() { return std::string(DDP_BIN_DIR) + "/train"; }

testing::ProcessResult run_train(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {train_path(), "--model", "mlp", "--data", "synthetic", "--hidden", "8",
                                   "--synthetic-samples", "64", "--batch-size", "8", "--eval-batches", "1"};
  argv.insert(argv.end(), args.begin(), args.end());
  testing::ProcessOptions po;
  po.unset_env = {"LOCAL_RANK", "RANK", "WORLD_SIZE", "DDP_DEBUG"};
  po.timeout_s = 60;
  return testing::run_process(argv, po);
}

struct LevelGuard {
  log::Level saved = log::level();
  ~LevelGuard() {
    log::set_level(saved);
    log::set_rank(-1);
    ::unsetenv("DDPRUN_PREFIXES_OUTPUT");
  }
};

}  // namespace

TEST(UserMessages, SourceLocationsAreLeftOutUnlessDebugging) {
  LevelGuard guard;
  std::string what;
  try {
    DDP_FAIL("checkpoint 'x': tensor 'a' is missing");
  } catch (const Error& e) {
    what = e.what();
  }
  ASSERT_NE(what.find(".cpp:"), std::string::npos) << "ddp::Error keeps the location for developers: " << what;
  log::set_level(log::Level::Warn);
  EXPECT_EQ(log::for_user(what), "checkpoint 'x': tensor 'a' is missing");
  log::set_level(log::Level::Info);  // DDP_DEBUG=INFO
  EXPECT_EQ(log::for_user(what), what);
  // Nested errors ("rank 1 failed: <its error>") lose every location; ordinary colons stay.
  EXPECT_EQ(log::strip_source_locations(
                "runtime/distributed/gloo_group.cpp:250: allreduce failed: "
                "(runtime/distributed/store.cpp:88: peer closed) at 10:42: see x.cpp"),
            "allreduce failed: (peer closed) at 10:42: see x.cpp");
  EXPECT_EQ(log::strip_source_locations("/abs/path/models/gpt.h:7: bad"), "bad");
}

TEST(UserMessages, ErrorLinesCarryOneRankPrefixAndNoLocation) {
  LevelGuard guard;
  log::set_level(log::Level::Warn);
  log::set_rank(0);
  ::testing::internal::CaptureStderr();
  DDP_LOG(Error, "runtime/distributed/gloo_group.cpp:250: the peer closed the connection");
  std::string alone = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(alone, "[rank 0] ddp ERROR: the peer closed the connection\n");
  ::setenv("DDPRUN_PREFIXES_OUTPUT", "1", 1);  // ddprun puts "[rank 0] " in front of every line itself
  ::testing::internal::CaptureStderr();
  DDP_LOG(Error, "runtime/distributed/gloo_group.cpp:250: the peer closed the connection");
  std::string launched = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(launched, "ddp ERROR: the peer closed the connection\n");
}

TEST(UserMessages, TrainErrorsHaveNoSourceLocation) {
  auto r = run_train({"--resume", "auto"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("--resume auto looks for the newest checkpoint in --checkpoint-dir, which is not set"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find(".cpp:"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(" in  ()"), std::string::npos) << r.err;
}

TEST(UserMessages, UnwritableOutputPathsFailBeforeTheFirstStep) {
  auto ckpt = run_train({"--steps", "3", "--checkpoint-dir", "/proc/ddp_no_such_dir/x"});
  EXPECT_EQ(ckpt.exit_code, 1);
  EXPECT_NE(ckpt.err.find("--checkpoint-dir /proc/ddp_no_such_dir/x: cannot create the folder"),
            std::string::npos)
      << ckpt.err;
  EXPECT_NE(ckpt.err.find("before the first step"), std::string::npos) << ckpt.err;
  EXPECT_EQ(ckpt.out.find("step "), std::string::npos) << "trained before failing: " << ckpt.out;

  auto trace = run_train({"--steps", "3", "--trace", "/nonexistent/dir/t.json"});
  EXPECT_EQ(trace.exit_code, 1);
  EXPECT_NE(trace.err.find("--trace /nonexistent/dir/t.json: the folder '/nonexistent/dir' does not exist"),
            std::string::npos)
      << trace.err;
  EXPECT_EQ(trace.out.find("step "), std::string::npos) << "trained before failing: " << trace.out;
}

// A data path the user gave that does not exist is a wrong path: the message names the file it looked for and
// does not send them to install the Debian package (which puts the data somewhere else).
TEST(UserMessages, AMissingDataPathIsAWrongPathNotAMissingPackage) {
  auto mnist = run_train({"--data", "fashion-mnist", "--data-path", "/nonexistent/fm", "--steps", "1"});
  EXPECT_EQ(mnist.exit_code, 1) << mnist.err;
  EXPECT_NE(
      mnist.err.find("data file '/nonexistent/fm/train-images-idx3-ubyte.gz' does not exist; check the path"),
      std::string::npos)
      << mnist.err;
  EXPECT_EQ(mnist.err.find("apt-get"), std::string::npos) << mnist.err;
  auto text = run_train(
      {"--model", "gpt", "--data", "moby-dick", "--data-path", "/nonexistent/moby.txt", "--steps", "1"});
  EXPECT_EQ(text.exit_code, 1) << text.err;
  EXPECT_NE(text.err.find("data file '/nonexistent/moby.txt' does not exist; check the path"),
            std::string::npos)
      << text.err;
  EXPECT_EQ(text.err.find("apt-get"), std::string::npos) << text.err;
  // Without --data-path, at the packaged location, the message still names the package (where it is missing).
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    auto packaged = run_train({"--data", "fashion-mnist", "--steps", "1"});
    EXPECT_EQ(packaged.exit_code, 1) << packaged.err;
    EXPECT_NE(packaged.err.find("apt-get install dataset-fashion-mnist"), std::string::npos) << packaged.err;
  }
}

// Resuming a checkpoint at or past the run's last step: "nothing to do" and why (--steps counts from the
// start), exit 0, and no summary of a run that trained nothing.
TEST(UserMessages, ResumingAtOrPastTheLastStepSaysThereIsNothingToDo) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("ddp_nothing_to_do_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  auto first = run_train({"--steps", "5", "--checkpoint-dir", dir});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_TRUE(std::filesystem::exists(dir + "/ckpt-step5.safetensors")) << first.out;
  auto past = run_train({"--steps", "3", "--checkpoint-dir", dir, "--resume", "auto"});
  EXPECT_EQ(past.exit_code, 0) << past.err;
  EXPECT_NE(past.out.find("train: nothing to do: checkpoint " + dir +
                          "/ckpt-step5.safetensors is at step 5, "
                          "past the --steps 3 of this run, which count from the start of training"),
            std::string::npos)
      << past.out;
  EXPECT_NE(past.out.find("--steps 8"), std::string::npos) << past.out;
  EXPECT_EQ(past.out.find("train loss"), std::string::npos) << past.out;
  EXPECT_EQ(past.out.find("== summary"), std::string::npos) << past.out;
  auto complete = run_train({"--steps", "5", "--checkpoint-dir", dir, "--resume", "auto"});
  EXPECT_EQ(complete.exit_code, 0) << complete.err;
  EXPECT_NE(complete.out.find("is at step 5, the last step of --steps 5: that training is complete"),
            std::string::npos)
      << complete.out;
  EXPECT_EQ(complete.out.find("train loss"), std::string::npos) << complete.out;
  auto more = run_train({"--steps", "6", "--checkpoint-dir", dir, "--resume", "auto"});
  EXPECT_EQ(more.exit_code, 0) << more.err;
  EXPECT_EQ(more.out.find("nothing to do"), std::string::npos) << more.out;
  EXPECT_NE(more.out.find("== summary: mlp, world 1, 6 steps"), std::string::npos) << more.out;
  std::filesystem::remove_all(dir);
}

TEST(UserMessages, TrainHelpSaysBranchyNeedsFindUnusedParameters) {
  testing::ProcessOptions po;
  po.unset_env = {"LOCAL_RANK", "RANK", "WORLD_SIZE"};
  auto r = testing::run_process({train_path(), "--help"}, po);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("branchy needs --find-unused-parameters, at any world size"), std::string::npos)
      << r.out;
}

}  // namespace ddp

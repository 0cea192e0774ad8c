// test_train_hostile.cpp - the training loop against careless use: a loss turning NaN on one rank stops every
// rank at the same step naming the rank and the last good checkpoint; a resume with another optimizer or
// other settings is refused (and --reset-optimizer allows the switch); stale temp files of killed saves are
// removed by the next save; the summary of a 2-step run and a GPT's sample of random bytes print sensibly;
// the "checkpoint:" line reaches a pipe as soon as the checkpoint exists.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "models/train.h"
#include "models/train_checks.h"
#include "runtime/core/error.h"
#include "runtime/distributed/local_world.h"
#include "tests/support/run_process.h"

using namespace ddp;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}
models::TrainOptions tiny(const std::string& model = "mlp") {
  models::TrainOptions o;
  o.model = model;
  o.data = "synthetic";
  o.quiet = true;
  o.steps = 8;
  o.warmup_steps = 1;
  o.batch_size = 8;
  o.eval_batches = 1;
  o.eval_interval = 0;
  o.synthetic_samples = 256;
  o.hidden = 16;
  o.context = 8;
  o.d_model = 8;
  o.n_head = 2;
  o.n_layer = 1;
  o.sample_tokens = 0;
  return o;
}
std::string temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("ddp_trainh_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}
// Runs train() on `world` threads and returns each rank's error message ("" when it finished).
std::vector<std::string> errors_of(int world, const std::function<models::TrainOptions(int rank)>& options) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
    try {
      models::train(options(rank), borrow(pg));
    } catch (const ddp::Error& e) {
      errors[static_cast<size_t>(rank)] = e.what();
    }
  });
  return errors;
}
}  // namespace

TEST(TrainHostile, ANanLossOnOneRankStopsEveryRankAtThatStep) {
  const std::string dir = temp_dir("nan");
  auto errors = errors_of(2, [&](int) {
    models::TrainOptions o = tiny();
    o.steps = 20;
    o.checkpoint_dir = dir;
    o.checkpoint_interval = 2;
    o.fault_nan_step = 5;  // rank 1 only
    o.fault_nan_rank = 1;
    return o;
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& m = errors[static_cast<size_t>(r)];
    ASSERT_FALSE(m.empty()) << "rank " << r << " did not stop";
    EXPECT_NE(m.find("training stopped at step 5: the loss is not finite on rank 1"), std::string::npos) << m;
    // ckpt-step4 holds the parameters whose loss was NaN at step 5; step 2's were confirmed by step 3.
    EXPECT_NE(m.find("Last good checkpoint: " + dir + "/ckpt-step2.safetensors"), std::string::npos) << m;
  }
  std::filesystem::remove_all(dir);
}

TEST(TrainHostile, ADivergingRunStopsInsteadOfFinishingWithNan) {
  auto errors = errors_of(1, [](int) {
    models::TrainOptions o = tiny();
    o.optimizer = "sgd";
    o.clip_grad = 0;
    o.lr = 1e30;
    o.warmup_steps = 0;
    o.schedule = "constant";
    return o;
  });
  EXPECT_NE(errors[0].find("the loss is not finite on rank 0"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("Last good checkpoint: none"), std::string::npos) << errors[0];
}

TEST(TrainHostile, ResumeWithAnotherOptimizerOrOtherSettingsIsRefused) {
  const std::string dir = temp_dir("resume_checks");
  models::TrainOptions first = tiny();
  first.checkpoint_dir = dir;
  first.steps = 4;
  errors_of(1, [&](int) { return first; });
  ASSERT_TRUE(std::filesystem::exists(dir + "/ckpt-step4.safetensors"));

  models::TrainOptions sgd = first;
  sgd.steps = 6;
  sgd.resume = "auto";
  sgd.optimizer = "sgd";
  std::string m = errors_of(1, [&](int) { return sgd; })[0];
  EXPECT_NE(m.find("holds the state of optimizer adamw, but this run uses sgd"), std::string::npos) << m;
  EXPECT_NE(m.find("--reset-optimizer"), std::string::npos) << m;
  sgd.reset_optimizer = true;
  EXPECT_EQ(errors_of(1, [&](int) { return sgd; })[0], "") << "--reset-optimizer allows the switch";

  models::TrainOptions bigger = first;
  bigger.steps = 6;
  bigger.resume = dir + "/ckpt-step4.safetensors";
  bigger.batch_size = 16;
  m = errors_of(1, [&](int) { return bigger; })[0];
  EXPECT_NE(m.find("--batch-size 8 (this run: 16)"), std::string::npos) << m;
  std::filesystem::remove_all(dir);
}

TEST(TrainHostile, StaleTempFilesAreRemovedByTheNextSave) {
  const std::string dir = temp_dir("stale");
  std::filesystem::create_directories(dir);
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  const std::string stale = dir + "/ckpt-step2.safetensors.tmp." + std::to_string(child);
  std::ofstream(stale) << "half a checkpoint";
  models::TrainOptions o = tiny();
  o.checkpoint_dir = dir;
  o.steps = 2;
  EXPECT_EQ(errors_of(1, [&](int) { return o; })[0], "");
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt-step2.safetensors"));
  std::filesystem::remove_all(dir);
}

TEST(TrainHostile, ATwoStepRunReportsTheStepsItHasNotZero) {
  models::TrainOptions o = tiny();
  o.quiet = false;
  o.steps = 2;
  ::testing::internal::CaptureStdout();
  auto errors = errors_of(1, [&](int) { return o; });
  std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(errors[0], "");
  EXPECT_EQ(out.find("throughput 0 "), std::string::npos) << out;
  EXPECT_NE(out.find("(median of all 2 steps"), std::string::npos) << out;
}

TEST(TrainHostile, AGptSampleOfRandomBytesPrintsAsValidText) {
  models::TrainOptions o = tiny("gpt");
  o.quiet = false;
  o.steps = 2;
  o.sample_tokens = 300;  // synthetic data: any of 256 byte values
  ::testing::internal::CaptureStdout();
  auto errors = errors_of(1, [&](int) { return o; });
  std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(errors[0], "");
  const size_t at = out.find("sample: ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_EQ(models::printable_text(out), out) << "the output holds bytes that are not printable UTF-8";
  EXPECT_NE(out.find("\\x", at), std::string::npos) << "random bytes should have needed escapes";
}

TEST(TrainHostile, PrintableTextEscapesControlAndInvalidBytesKeepsUtf8) {
  EXPECT_EQ(models::printable_text("a\tb\nc"), "a\tb\nc");
  EXPECT_EQ(models::printable_text(std::string("x\0y\x1b[2J\x7f", 8)), "x\\x00y\\x1b[2J\\x7f");
  EXPECT_EQ(models::printable_text("caf\xc3\xa9 \xe2\x80\x94 ok"), "caf\xc3\xa9 \xe2\x80\x94 ok");
  EXPECT_EQ(models::printable_text("\xc3"), "\\xc3");           // truncated sequence
  EXPECT_EQ(models::printable_text("\xff\xfe"), "\\xff\\xfe");  // never valid in UTF-8
  EXPECT_EQ(models::printable_text("\xc0\xaf"), "\\xc0\\xaf");  // overlong
}

// Through a pipe, stdout is block-buffered: without a flush the "checkpoint:" lines stay in the buffer while
// `latest` already names the newer file.
TEST(TrainHostile, CheckpointLinesReachAPipeWhenTheCheckpointIsWritten) {
  const std::string dir = temp_dir("flush");
  std::string seen_when_step3_was_latest;
  ddp::testing::ProcessOptions po;
  po.unset_env = {"LOCAL_RANK", "RANK", "WORLD_SIZE"};
  po.timeout_s = 120;
  po.on_progress = [&](pid_t pid, const std::string& out, const std::string&) {
    std::ifstream latest(dir + "/latest");
    std::string name;
    if (!(latest && std::getline(latest, name)) || name.rfind("ckpt-step", 0) != 0) return;
    if (std::stoll(name.substr(9)) < 3 || !seen_when_step3_was_latest.empty()) return;
    seen_when_step3_was_latest = out + "<end>";
    ::kill(pid, SIGKILL);
  };
  auto r = ddp::testing::run_process(
      {std::string(DDP_BIN_DIR) + "/train", "--model", "mlp", "--data", "synthetic", "--hidden", "8",
       "--synthetic-samples", "512", "--batch-size", "8", "--steps", "100000", "--log-interval", "0",
       "--eval-interval", "0", "--checkpoint-dir", dir, "--checkpoint-interval", "1"},
      po);
  ASSERT_FALSE(seen_when_step3_was_latest.empty()) << "never reached step 3: " << r.err;
  EXPECT_NE(seen_when_step3_was_latest.find("checkpoint: " + dir + "/ckpt-step2.safetensors\n"),
            std::string::npos)
      << seen_when_step3_was_latest;
  std::filesystem::remove_all(dir);
}

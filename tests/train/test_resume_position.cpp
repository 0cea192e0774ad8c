// test_resume_position.cpp - a checkpoint whose position in the epoch is out of range for the resuming run's
// loader (issue 25, item 10): the error names the checkpoint file and its metadata field, not only the
// DataLoader's own numbers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "models/train.h"
#include "runtime/core/error.h"
#include "runtime/distributed/local_world.h"
#include "tests/checkpoint/checkpoint_test_util.h"

using namespace ddp;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

models::TrainOptions tiny(const std::string& dir) {
  models::TrainOptions o;
  o.model = "mlp";
  o.data = "synthetic";
  o.quiet = true;
  o.steps = 2;
  o.warmup_steps = 1;
  o.batch_size = 8;
  o.eval_batches = 1;
  o.eval_interval = 0;
  o.synthetic_samples = 64;
  o.hidden = 8;
  o.sample_tokens = 0;
  o.checkpoint_dir = dir;
  return o;
}

std::string train_error(const models::TrainOptions& o) {
  std::string error;
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
    try {
      models::train(o, borrow(pg));
    } catch (const Error& e) {
      error = e.what();
    }
  });
  return error;
}
}  // namespace

TEST(ResumePosition, AnOutOfRangeBatchPositionNamesTheCheckpointAndItsField) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("ddp_resume_pos_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  models::TrainOptions first = tiny(dir);
  ASSERT_EQ(train_error(first), "");
  const std::string ckpt = dir + "/ckpt-step2.safetensors";
  ASSERT_TRUE(std::filesystem::exists(ckpt));
  // A position past the end of the epoch, written by an editor that keeps every checksum valid (a checkpoint
  // of a run with more data, copied into this run's folder, looks the same).
  checkpoint::testing::rewrite_training_checkpoint(
      ckpt, [](checkpoint::SafetensorsContent& c) { c.metadata["batches_in_epoch"] = "999"; });
  models::TrainOptions resumed = tiny(dir);
  resumed.steps = 4;
  resumed.resume = "auto";
  const std::string m = train_error(resumed);
  EXPECT_NE(m.find("position 999"), std::string::npos) << m;
  EXPECT_NE(m.find("checkpoint '" + ckpt + "'"), std::string::npos) << m;
  EXPECT_NE(m.find("metadata field 'batches_in_epoch'"), std::string::npos) << m;
  std::filesystem::remove_all(dir);
}

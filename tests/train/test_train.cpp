// test_train.cpp - the training loop end to end on synthetic data: every model's loss goes down with 1 and 2
// ranks; a run stopped at step k and resumed from its checkpoint ends bitwise equal to an uninterrupted run;
// checkpoints of another model are refused with a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "models/train.h"
#include "runtime/checkpoint/training_checkpoint.h"
#include "models/mlp.h"
#include "runtime/distributed/local_world.h"

using namespace ddp;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}
models::TrainOptions small(const std::string& model) {
  models::TrainOptions o;
  o.model = model;
  o.data = "synthetic";
  o.quiet = true;
  o.steps = 60;
  o.warmup_steps = 2;
  o.batch_size = 16;
  o.eval_batches = 2;
  o.eval_interval = 0;
  o.synthetic_samples = 512;
  o.hidden = 32;
  o.context = 16;
  o.d_model = 16;
  o.n_head = 2;
  o.n_layer = 1;
  o.sample_tokens = 0;
  o.lr = 1e-2;
  o.find_unused_parameters = model == "branchy";
  return o;
}
std::string temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("ddp_train_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}
}  // namespace

class TrainModels : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(TrainModels, LossGoesDown) {
  auto [model, world] = GetParam();
  std::vector<models::TrainResult> results(world);
  dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
    results[rank] = models::train(small(model), borrow(pg));
  });
  EXPECT_LT(results[0].final_train_loss, results[0].first_loss * 0.9)
      << model << " world " << world << ": first " << results[0].first_loss << " final "
      << results[0].final_train_loss;
  EXPECT_TRUE(std::isfinite(results[0].val_loss));
  if (world == 2) {
    EXPECT_TRUE(results[0].final_params == results[1].final_params) << "ranks diverged";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TrainModels,
                         ::testing::Combine(::testing::Values("mlp", "cnn", "gpt", "branchy"),
                                            ::testing::Values(1, 2)));

TEST(Resume, StoppedAndResumedEqualsUninterruptedBitwise) {
  for (const char* model : {"mlp", "gpt"}) {
    const std::string dir = temp_dir(std::string("resume_") + model);
    models::TrainOptions o = small(model);
    o.steps = 10;
    o.dropout = std::string(model) == "gpt" ? 0.1 : 0.0;
    std::vector<models::TrainResult> full(2), resumed(2);
    dist::run_threads(2,
                      [&](int rank, dist::ProcessGroup& pg) { full[rank] = models::train(o, borrow(pg)); });
    models::TrainOptions first = o;
    first.checkpoint_dir = dir;
    first.stop_after = 4;  // "killed" after step 4 (its checkpoint is written as it stops)
    dist::run_threads(2, [&](int, dist::ProcessGroup& pg) { models::train(first, borrow(pg)); });
    models::TrainOptions second = o;
    second.checkpoint_dir = dir;
    second.resume = "auto";
    dist::run_threads(
        2, [&](int rank, dist::ProcessGroup& pg) { resumed[rank] = models::train(second, borrow(pg)); });
    EXPECT_EQ(resumed[0].steps_done, 10);
    EXPECT_TRUE(resumed[0].final_params == full[0].final_params)
        << model << ": resume is not bitwise identical";
    EXPECT_TRUE(resumed[1].final_params == full[1].final_params) << model << ": rank 1";
    std::filesystem::remove_all(dir);
  }
}

TEST(Resume, CheckpointOfAnotherModelIsRefusedWithNames) {
  const std::string dir = temp_dir("mismatch");
  std::filesystem::create_directories(dir);
  models::MLP a(models::MLPConfig{8, {4}, 3, DType::F32});
  checkpoint::save_training_checkpoint(dir + "/a.safetensors", a, nullptr, {});
  models::MLP b(models::MLPConfig{8, {5}, 3, DType::F32});
  try {
    checkpoint::load_training_checkpoint(dir + "/a.safetensors", b, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("a.safetensors"), std::string::npos) << m;
    EXPECT_NE(m.find("model.layers.0.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("(4, 8)"), std::string::npos) << m;
  }
  models::MLP c(models::MLPConfig{8, {4, 4}, 3, DType::F32});
  EXPECT_THROW(checkpoint::load_training_checkpoint(dir + "/a.safetensors", c, nullptr), Error);
  std::filesystem::remove_all(dir);
}

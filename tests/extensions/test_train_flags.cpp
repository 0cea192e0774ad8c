// test_train_flags.cpp - the `train` flags of the extensions end to end (threads as ranks, synthetic data):
// --sync-bn --zero trains the cnn, its checkpoint (optimizer state consolidated from the shards) resumes
// bitwise; each rank holds only part of the optimizer state; --sync-bn on a model without BatchNorm is refused.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "models/train.h"
#include "runtime/core/error.h"
#include "runtime/distributed/local_world.h"

using namespace ddp;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}
models::TrainOptions small_cnn() {
  models::TrainOptions o;
  o.model = "cnn";
  o.data = "synthetic";
  o.quiet = true;
  o.steps = 6;
  o.warmup_steps = 1;
  o.batch_size = 4;
  o.eval_batches = 1;
  o.eval_interval = 0;
  o.synthetic_samples = 128;
  o.lr = 1e-2;
  o.sync_bn = true;
  o.zero = true;
  return o;
}
}  // namespace

TEST(TrainFlags, SyncBnWithZeroTrainsAndResumesBitwise) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("h16_train_flags_" + std::to_string(getpid()))).string();
  models::TrainOptions o = small_cnn();
  std::vector<models::TrainResult> full(2), resumed(2);
  dist::run_threads(2, [&](int rank, dist::ProcessGroup& pg) { full[rank] = models::train(o, borrow(pg)); });
  EXPECT_TRUE(std::isfinite(full[0].final_train_loss));
  // Sharded: each rank holds a part of the AdamW state, neither all of it.
  EXPECT_GT(full[0].optimizer_state_bytes, 0);
  EXPECT_GT(full[1].optimizer_state_bytes, 0);
  models::TrainOptions first = o;
  first.checkpoint_dir = dir;
  first.stop_after = 3;
  dist::run_threads(2, [&](int, dist::ProcessGroup& pg) { models::train(first, borrow(pg)); });
  models::TrainOptions second = o;
  second.checkpoint_dir = dir;
  second.resume = "auto";
  dist::run_threads(2, [&](int rank, dist::ProcessGroup& pg) { resumed[rank] = models::train(second, borrow(pg)); });
  EXPECT_EQ(resumed[0].steps_done, 6);
  EXPECT_TRUE(resumed[0].final_params == full[0].final_params) << "resume with --zero is not bitwise identical";
  std::filesystem::remove_all(dir);

  // The same run without --zero holds the whole state on rank 0: the shards add up to it.
  models::TrainOptions plain = o;
  plain.zero = false;
  plain.steps = 1;
  std::vector<models::TrainResult> p(2);
  dist::run_threads(2, [&](int rank, dist::ProcessGroup& pg) { p[rank] = models::train(plain, borrow(pg)); });
  EXPECT_EQ(full[0].optimizer_state_bytes + full[1].optimizer_state_bytes, p[0].optimizer_state_bytes);
  EXPECT_LT(full[0].optimizer_state_bytes, p[0].optimizer_state_bytes);
}

TEST(TrainFlags, SyncBnWithoutBatchNormIsRefused) {
  models::TrainOptions o = small_cnn();
  o.model = "mlp";
  o.hidden = 8;
  try {
    dist::run_threads(1, [&](int, dist::ProcessGroup& pg) { models::train(o, borrow(pg)); });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--sync-bn: model mlp has no BatchNorm2d"), std::string::npos) << e.what();
  }
}

TEST(TrainFlags, PowerSGDWithStaticGraphTrainsTheGpt) {
  models::TrainOptions o;
  o.model = "gpt";
  o.data = "synthetic";
  o.quiet = true;
  o.steps = 30;
  o.warmup_steps = 2;
  o.batch_size = 8;
  o.eval_batches = 1;
  o.eval_interval = 0;
  o.synthetic_samples = 256;
  o.context = 16;
  o.d_model = 16;
  o.n_head = 2;
  o.n_layer = 1;
  o.sample_tokens = 0;
  o.lr = 1e-2;
  o.static_graph = true;
  o.comm_hook = "powersgd";
  o.powersgd_rank = 2;
  o.powersgd_start_iter = 3;
  std::vector<models::TrainResult> r(2);
  dist::run_threads(2, [&](int rank, dist::ProcessGroup& pg) { r[rank] = models::train(o, borrow(pg)); });
  EXPECT_LT(r[0].final_train_loss, r[0].first_loss - 0.3);
  EXPECT_TRUE(r[0].final_params == r[1].final_params);
  // Compressed from iteration 3: far fewer bytes per step than the parameters' size.
  int64_t param_bytes = 0;
  for (auto& p : r[0].final_params) param_bytes += static_cast<int64_t>(p.size() * sizeof(float));
  EXPECT_LT(r[0].comm_bytes_per_step, 0.5 * static_cast<double>(param_bytes));
}

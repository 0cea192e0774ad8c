// test_train_disagreement.cpp - `train` when ranks differ (issue 10): --dtype float64 evaluates (the
// evaluation converts its input as training does); --uneven-steps with Join ends on every rank with identical
// models, in threads and as ddprun processes; without Join the launcher reports a clear collective-mismatch
// error and a failing exit code - no SIGABRT from Gloo, no hang.
#include <gtest/gtest.h>

#include <cmath>

#include "models/train.h"
#include "runtime/distributed/local_world.h"
#include "tests/support/run_process.h"

using namespace ddp;
using namespace ddp::testing;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}
models::TrainOptions tiny(const std::string& model) {
  models::TrainOptions o;
  o.model = model;
  o.data = "synthetic";
  o.quiet = true;
  o.steps = 6;
  o.warmup_steps = 1;
  o.batch_size = 8;
  o.eval_batches = 2;
  o.eval_interval = 0;
  o.synthetic_samples = 256;
  o.hidden = 16;
  o.lr = 1e-2;
  return o;
}
std::vector<std::string> train_argv(std::vector<std::string> extra) {
  // --standalone: a free port, so launcher tests that ctest runs in parallel never share 29500
  std::vector<std::string> argv = {ddprun_path(),
                                   "--standalone",
                                   "--nproc-per-node",
                                   "2",
                                   std::string(DDP_BIN_DIR) + "/train",
                                   "--model",
                                   "mlp",
                                   "--data",
                                   "synthetic",
                                   "--synthetic-samples",
                                   "256",
                                   "--hidden",
                                   "16",
                                   "--batch-size",
                                   "8",
                                   "--steps",
                                   "8",
                                   "--eval-batches",
                                   "2",
                                   "--log-interval",
                                   "2",
                                   "--device",
                                   "cpu",
                                   "--threads",
                                   "1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}
}  // namespace

TEST(TrainDisagreement, Float64EvaluatesMlpAndCnn) {
  for (const char* model : {"mlp", "cnn"}) {
    models::TrainOptions o = tiny(model);
    o.dtype = "float64";
    o.steps = 2;
    models::TrainResult r;
    dist::run_threads(1, [&](int, dist::ProcessGroup& pg) { r = models::train(o, borrow(pg)); });
    EXPECT_TRUE(std::isfinite(r.val_loss)) << model;
    EXPECT_GE(r.val_accuracy, 0.0) << model;
  }
}

// train zeroes bucket-view gradients in place (so they stay views); the run equals the default one.
TEST(TrainDisagreement, BucketViewRunEqualsDefaultRun) {
  std::vector<models::TrainResult> plain(2), view(2);
  models::TrainOptions o = tiny("mlp");
  dist::run_threads(2, [&](int rank, dist::ProcessGroup& pg) { plain[rank] = models::train(o, borrow(pg)); });
  o.gradient_as_bucket_view = true;
  dist::run_threads(2, [&](int rank, dist::ProcessGroup& pg) { view[rank] = models::train(o, borrow(pg)); });
  EXPECT_TRUE(view[0].final_params == view[1].final_params);
  EXPECT_TRUE(view[0].final_params == plain[0].final_params);
}

TEST(TrainDisagreement, UnevenStepsWithJoinEndOnEveryRankWithIdenticalModels) {
  models::TrainOptions o = tiny("mlp");
  o.uneven_steps = 2;
  o.log_interval = 1;
  o.eval_interval = 2;
  std::vector<models::TrainResult> r(3);
  dist::run_threads(3, [&](int rank, dist::ProcessGroup& pg) { r[rank] = models::train(o, borrow(pg)); });
  EXPECT_EQ(r[0].steps_done, 6);
  EXPECT_EQ(r[1].steps_done, 4);
  EXPECT_EQ(r[2].steps_done, 2);
  EXPECT_TRUE(r[0].final_params == r[1].final_params && r[0].final_params == r[2].final_params);
  EXPECT_TRUE(std::isfinite(r[0].val_loss));
}

TEST(TrainDisagreement, LauncherRunWithUnevenStepsAndJoinEndsCleanly) {
  ProcessOptions po;
  po.timeout_s = 120;
  po.set_env["DDP_COLLECTIVE_TIMEOUT_S"] = "20";
  auto r = run_process(train_argv({"--uneven-steps", "3"}), po);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("summary"), std::string::npos) << r.out << r.err;
}

TEST(TrainDisagreement, LauncherRunWithUnevenStepsWithoutJoinFailsClearlyWithoutAbort) {
  // The default CPU backend of one host (shm) and Gloo (call-hashed tags: no SIGABRT from mismatched sizes).
  for (const char* backend : {"auto", "gloo"}) {
    ProcessOptions po;
    po.timeout_s = 120;
    po.set_env["DDP_COLLECTIVE_TIMEOUT_S"] = "5";  // short, but room for start-up on a loaded box
    auto r = run_process(train_argv({"--uneven-steps", "3", "--no-join", "--backend", backend}), po);
    const std::string all = r.out + r.err;
    EXPECT_FALSE(r.timed_out) << backend << all;
    EXPECT_EQ(r.exit_code, 1) << backend << all;  // the worker's own error exit, not 134 (SIGABRT)
    EXPECT_NE(all.find("collective mismatch at sequence number"), std::string::npos) << backend << all;
    if (std::string(backend) == "gloo") EXPECT_NE(all.find("use ddp::Join"), std::string::npos) << all;
    EXPECT_EQ(all.find("EnforceNotMet"), std::string::npos) << backend << all;
    EXPECT_EQ(all.find("SIGABRT"), std::string::npos) << backend << all;
    EXPECT_EQ(all.find("terminate called"), std::string::npos) << backend << all;
  }
}

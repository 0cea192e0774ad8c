// test_train_join.cpp - `train` when ranks run out of batches at different steps (issue 25): with --join (the
// default) it trains under Join whenever the ranks' step counts differ - from --uneven-steps or from their
// own data or --steps - and every rank ends with the same model as the --uneven-steps run of the same shape;
// --zero is shadowed too; --sync-bn with uneven steps is refused on every rank with the reason.
#include <gtest/gtest.h>

#include <chrono>

#include "models/train.h"
#include "runtime/distributed/local_world.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;
using namespace std::chrono_literals;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}
dist::ProcessGroupOptions short_timeout() {
  dist::ProcessGroupOptions o;
  o.timeout = 5s;
  return o;
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
  o.dtype = "float64";
  return o;
}
// Three ranks; rank r's options from `per_rank`.
std::vector<models::TrainResult> train3(const std::function<models::TrainOptions(int rank)>& per_rank,
                                        const std::string& backend) {
  std::vector<models::TrainResult> r(3);
  dist::run_threads(
      3, [&](int rank, dist::ProcessGroup& pg) { r[rank] = models::train(per_rank(rank), borrow(pg)); },
      short_timeout(), backend);
  return r;
}
}  // namespace

// --zero: the joined ranks step their shards with the averaged, clipped gradients at the schedule's
// learning rate, so the sharded run equals the unsharded one.
TEST(TrainJoin, RanksWithFewerStepsOfTheirOwnTrainUnderJoinLikeUnevenSteps) {
  for (const char* backend : {"shm", "gloo"}) {
    std::vector<std::vector<double>> unsharded;
    for (bool zero : {false, true}) {
      SCOPED_TRACE(std::string(backend) + (zero ? " zero" : ""));
      auto uneven = train3(
          [&](int) {
            models::TrainOptions o = tiny("mlp");
            o.uneven_steps = 2;
            o.zero = zero;
            o.optimizer = "adamw";
            o.schedule = "cosine";
            o.clip_grad = 0.01;  // clips every step
            return o;
          },
          backend);
      auto own = train3(
          [&](int rank) {
            models::TrainOptions o = tiny("mlp");
            o.steps = 6 - 2 * rank;  // as if rank r's data gave it 2r fewer steps
            o.zero = zero;
            o.optimizer = "adamw";
            o.schedule = "cosine";
            o.clip_grad = 0.01;  // clips every step
            return o;
          },
          backend);
      for (int r = 0; r < 3; ++r) {
        EXPECT_EQ(uneven[r].steps_done, 6 - 2 * r);
        EXPECT_EQ(own[r].steps_done, 6 - 2 * r);
        EXPECT_TRUE(uneven[r].final_params == uneven[0].final_params) << "rank " << r;
        EXPECT_TRUE(own[r].final_params == uneven[0].final_params) << "rank " << r;
      }
      if (!zero) unsharded = uneven[0].final_params;
      if (zero) EXPECT_LT(ddp::testing::max_relative_difference(uneven[0].final_params, unsharded), 1e-12);
    }
  }
}

TEST(TrainJoin, SyncBatchNormWithUnevenStepsIsRefusedOnEveryRank) {
  std::vector<std::string> errors(3);
  dist::run_threads(
      3,
      [&](int rank, dist::ProcessGroup& pg) {
        models::TrainOptions o = tiny("cnn");
        o.sync_bn = true;
        o.uneven_steps = 1;
        try {
          models::train(o, borrow(pg));
        } catch (const Error& e) {
          errors[rank] = e.what();
        }
      },
      short_timeout(), "shm");
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(errors[r].find("SyncBatchNorm"), std::string::npos) << r << ": " << errors[r];
}

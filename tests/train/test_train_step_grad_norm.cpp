// test_train_step_grad_norm.cpp - train_step hands back the gradient norm its clipping measured
// (StepResult::grad_norm: on CUDA a device scalar nobody has read; here a CPU scalar), and none without
// clipping.
#include <gtest/gtest.h>

#include "models/mlp.h"
#include "models/train_step.h"
#include "runtime/distributed/local_world.h"

using namespace ddp;

TEST(TrainStepGradNorm, TheClipsNormComesBackUnreadAndNoneWithoutClipping) {
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
    nn::manual_seed(3);
    auto model = std::make_shared<models::MLP>(models::MLPConfig{8, {16}, 4, DType::F32});
    DistributedDataParallel ddp(
        model, std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg));
    optim::SGD opt(model->named_parameters(), {.lr = 0.1});
    auto next_batch = [] {
      data::Batch b;
      b.x = Tensor::randn({4, 8}, 7);
      b.y = Tensor::from_data<int64_t>({0, 1, 2, 3}, {4});
      return b;
    };
    models::StepOptions o;
    o.clip_grad = 1e-3;
    const models::StepResult clipped = models::train_step(ddp, opt, next_batch, o);
    ASSERT_TRUE(clipped.grad_norm.defined());
    EXPECT_TRUE(clipped.grad_norm.device().is_cpu());
    EXPECT_EQ(clipped.grad_norm.dtype(), DType::F64);
    EXPECT_GT(clipped.grad_norm.item(), 1e-3) << "a norm this small would not have been clipped";
    o.clip_grad = 0;
    EXPECT_FALSE(models::train_step(ddp, opt, next_batch, o).grad_norm.defined());
  });
}

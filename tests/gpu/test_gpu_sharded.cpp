// test_gpu_sharded.cpp - ZeRO-2 and ZeRO-3 (runtime/ddp/sharded/) on CUDA parameters: under NCCL (world 1: a
// reduce-scatter and all-gather of one rank, and the gather group a second NCCL communicator) and through the
// Gloo-staged path (two and three ranks on one GPU), each against plain DDP + AdamW on the same GPU. Skips
// with "skipped: no GPU".
#include <gtest/gtest.h>

#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/core/device.h"
#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/ddp/sharded/sharded_optimizer.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/ops/loss.h"
#include "tests/gpu/nccl_world_one.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;

namespace {
bool have_gpu() { return cuda_device_count() > 0; }
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}
std::unique_ptr<optim::Optimizer> adamw(std::vector<nn::NamedTensor> ps) {
  return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWOptions{.lr = 1e-3});
}
Tensor input(int step, int rank) { return Tensor::randn({8, 32}, 40 + step + 100 * rank).to(Device::cuda(0)); }
Tensor target(int step) {
  std::vector<int64_t> y(8);
  for (int64_t i = 0; i < 8; ++i) y[i] = (i + step) % 10;
  return Tensor::from_data(y, {8}).to(Device::cuda(0));
}
std::shared_ptr<models::MLP> make_model() {
  nn::manual_seed(5);
  auto m = std::make_shared<models::MLP>(models::MLPConfig{32, {64, 48}, 10, DType::F32});
  m->to(Device::cuda(0));
  return m;
}

// stage 0: plain DDP; 2, 3: sharded. Rank 0's parameters after 5 steps.
std::vector<std::vector<double>> train(int stage, std::shared_ptr<dist::ProcessGroup> pg,
                                       std::shared_ptr<dist::ProcessGroup> gather) {
  auto model = make_model();
  std::vector<std::vector<double>> out;
  if (stage == 0) {
    DistributedDataParallel ddp(model, pg);
    auto opt = adamw(model->named_parameters());
    for (int s = 0; s < 5; ++s) {
      opt->zero_grad();
      autograd::backward(ops::cross_entropy(ddp.forward(input(s, pg->rank())), target(s)));
      opt->step();
    }
    device_synchronize();
    return ddp::testing::snapshot_params(*model);
  }
  ShardOptions o;
  o.stage = stage;
  o.gather_group = gather;
  ShardedDataParallel sdp(model, pg, o);
  ShardedOptimizer opt(sdp, adamw);
  for (int s = 0; s < 5; ++s) {
    autograd::backward(ops::cross_entropy(sdp.forward(input(s, pg->rank())), target(s)));
    sdp.clip_grad_norm_(1e9);  // the global norm through the group (a host value staged on NCCL)
    opt.step();
    opt.zero_grad();
  }
  auto whole = sdp.gathered_parameters();
  device_synchronize();
  return ddp::testing::snapshot_params(*model);
}
}  // namespace

TEST(GpuSharded, Zero2AndZero3UnderNcclEqualPlainDdp) {
  if (!have_gpu()) GTEST_SKIP() << "skipped: no GPU";
  dist::run_threads(1, [&](int, dist::ProcessGroup&, dist::Store& store) {
    auto pg = ddp::testing::nccl_world_one(store, "sharded-main");
    auto gather = ddp::testing::nccl_world_one(store, "sharded-gather");
    const auto plain = train(0, pg, nullptr);
    EXPECT_LT(ddp::testing::max_relative_difference(train(2, pg, nullptr), plain), 1e-5);
    EXPECT_LT(ddp::testing::max_relative_difference(train(3, pg, gather), plain), 1e-5);
  }, dist::ProcessGroupOptions{});
}

TEST(GpuSharded, Zero2AndZero3ThroughTheGlooStagedPathEqualPlainDdp) {
  if (!have_gpu()) GTEST_SKIP() << "skipped: no GPU";
  for (int world : {2, 3}) {
    std::vector<std::vector<std::vector<double>>> got(3);
    dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg, dist::Store& store) {
      dist::DistEnv env;
      env.rank = rank;
      env.world_size = world;
      dist::ProcessGroupOptions po;
      po.name = "gather";
      auto gather = dist::new_process_group(env, store, "gloo", po);
      auto a = train(0, borrow(pg), nullptr);
      auto b = train(2, borrow(pg), nullptr);
      auto c = train(3, borrow(pg), gather);
      if (rank == 0) got = {a, b, c};
    }, dist::ProcessGroupOptions{}, "gloo");
    EXPECT_LT(ddp::testing::max_relative_difference(got[1], got[0]), 1e-5) << "world " << world;
    EXPECT_LT(ddp::testing::max_relative_difference(got[2], got[0]), 1e-5) << "world " << world;
  }
}

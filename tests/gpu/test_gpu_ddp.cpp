// test_gpu_ddp.cpp - DDP on a GPU: NCCL with world size 1, two ranks on ONE GPU through the Gloo-staged path
// (NCCL refuses two ranks on one device), and the reducer's stream/event ordering checked by comparing GPU
// training against the same training on the CPU. Every test skips with "skipped: no GPU" without a device.
#include <gtest/gtest.h>

#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/init.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;

namespace {
bool have_gpu() { return cuda_device_count() > 0; }
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

// Trains an MLP for `steps` on `device` under `pg`; rank r uses rows [r*b, (r+1)*b) of each step's batch.
std::vector<std::vector<double>> train_mlp(dist::ProcessGroup& pg, Device device, int steps, int64_t per_rank,
                                           double bucket_mb) {
  nn::manual_seed(5);
  auto model = std::make_shared<models::MLP>(models::MLPConfig{32, {64, 64}, 10, DType::F32});
  model->to(device);
  DDPOptions o;
  o.bucket_cap_mb = o.first_bucket_mb = bucket_mb;
  DistributedDataParallel ddp(model, borrow(pg), o);
  optim::SGD opt(model->named_parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int s = 0; s < steps; ++s) {
    const int64_t rows = per_rank * pg.size();
    Tensor x = Tensor::randn({rows, 32}, 40 + s).slice0(pg.rank() * per_rank, (pg.rank() + 1) * per_rank);
    std::vector<int64_t> y(per_rank);
    for (int64_t i = 0; i < per_rank; ++i) y[i] = (i + s + pg.rank() * per_rank) % 10;
    Tensor loss =
        ops::cross_entropy(ddp.forward(x.clone().to(device)), Tensor::from_data(y, {per_rank}).to(device));
    autograd::backward(loss);
    opt.step();
    opt.zero_grad();
  }
  device_synchronize();
  return ddp::testing::snapshot_params(*model);
}
}  // namespace

TEST(Gpu, NcclWorldSizeOneAllreduceAndTraining) {
  if (!have_gpu()) GTEST_SKIP() << "skipped: no GPU";
  dist::DistEnv env;  // world of one
  auto ctx = dist::init_distributed(env, "nccl");
  ASSERT_EQ(ctx.group->backend_name(), "nccl");
  Tensor t = Tensor::full({1000}, 2.5, DType::F32, Device::cuda(0));
  ctx.group->allreduce({t.raw_data(), t.numel(), t.dtype(), t.device(), t.storage()}, dist::ReduceOp::Sum)
      ->wait();
  EXPECT_DOUBLE_EQ(t.to_double_vector()[999], 2.5);
  // The reducer's streams and events: GPU training through NCCL matches the CPU run (float32 tolerance).
  auto gpu = train_mlp(*ctx.group, Device::cuda(0), 5, 16, 0.01);
  std::vector<std::vector<double>> cpu;
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) { cpu = train_mlp(pg, Device::cpu(), 5, 16, 0.01); });
  EXPECT_LT(ddp::testing::max_relative_difference(gpu, cpu), 1e-3);
}

TEST(Gpu, TwoRanksOnOneGpuThroughGlooStaging) {
  if (!have_gpu()) GTEST_SKIP() << "skipped: no GPU";
  std::vector<std::vector<std::vector<double>>> gpu(2);
  dist::run_threads(2, [&](int rank, dist::ProcessGroup& pg) {
    gpu[rank] = train_mlp(pg, Device::cuda(0), 5, 8, 0.01);  // several buckets: exercises in-order launches
  });
  std::vector<std::vector<std::vector<double>>> cpu(2);
  dist::run_threads(
      2, [&](int rank, dist::ProcessGroup& pg) { cpu[rank] = train_mlp(pg, Device::cpu(), 5, 8, 0.01); });
  EXPECT_TRUE(gpu[0] == gpu[1]) << "the two GPU ranks diverged";
  EXPECT_LT(ddp::testing::max_relative_difference(gpu[0], cpu[0]), 1e-3);
}

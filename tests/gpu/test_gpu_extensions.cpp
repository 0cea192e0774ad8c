// test_gpu_extensions.cpp - the extensions on a GPU (docs/extensions.md): the bf16 and PowerSGD comm hooks
// under NCCL (world 1) against the plain all-reduce, SyncBatchNorm's op on CUDA tensors through the Gloo-staged
// path (two ranks on one GPU) against the CPU op, and ZeRO on CUDA parameters. Skips with "skipped: no GPU".
#include <gtest/gtest.h>

#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/ddp/powersgd_hook.h"
#include "runtime/ddp/zero_redundancy_optimizer.h"
#include "runtime/distributed/init.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/sync_batchnorm.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;

namespace {
bool have_gpu() { return cuda_device_count() > 0; }
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

std::vector<std::vector<double>> train(dist::ProcessGroup& pg, std::shared_ptr<CommHook> hook, bool zero) {
  nn::manual_seed(5);
  auto model = std::make_shared<models::MLP>(models::MLPConfig{32, {64}, 10, DType::F32});
  model->to(Device::cuda(0));
  DDPOptions o;
  o.comm_hook = std::move(hook);
  DistributedDataParallel ddp(model, borrow(pg), o);
  auto make = [](std::vector<nn::NamedTensor> ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWOptions{.lr = 1e-3});
  };
  std::unique_ptr<optim::Optimizer> opt =
      zero ? std::make_unique<optim::ZeroRedundancyOptimizer>(model->named_parameters(), borrow(pg), make)
           : make(model->named_parameters());
  for (int s = 0; s < 5; ++s) {
    Tensor x = Tensor::randn({16, 32}, 40 + s + 100 * pg.rank()).to(Device::cuda(0));
    std::vector<int64_t> y(16);
    for (int64_t i = 0; i < 16; ++i) y[i] = (i + s) % 10;
    opt->zero_grad();
    autograd::backward(ops::cross_entropy(ddp.forward(x), Tensor::from_data(y, {16}).to(Device::cuda(0))));
    opt->step();
  }
  device_synchronize();
  return ddp::testing::snapshot_params(*model);
}
}  // namespace

TEST(GpuExtensions, Bf16AndPowerSGDHooksUnderNccl) {
  if (!have_gpu()) GTEST_SKIP() << "skipped: no GPU";
  dist::DistEnv env;
  auto ctx = dist::init_distributed(env, "nccl");
  auto plain = train(*ctx.group, nullptr, false);
  auto bf16 = train(*ctx.group, std::make_shared<BF16CompressHook>(), false);
  EXPECT_LT(ddp::testing::max_relative_difference(bf16, plain), 5e-2);
  PowerSGDOptions po;
  po.matrix_approximation_rank = 64;  // full rank: equal to the plain all-reduce up to rounding
  po.start_iter = 2;
  po.min_compression_rate = 0;
  auto psgd = train(*ctx.group, std::make_shared<PowerSGDHook>(po), false);
  EXPECT_LT(ddp::testing::max_relative_difference(psgd, plain), 1e-3);
  auto zero = train(*ctx.group, nullptr, true);
  EXPECT_LT(ddp::testing::max_relative_difference(zero, plain), 1e-6);
}

TEST(GpuExtensions, SyncBatchNormOnCudaMatchesTheCpuOp) {
  if (!have_gpu()) GTEST_SKIP() << "skipped: no GPU";
  std::vector<std::vector<double>> gpu(2), cpu(2);
  for (bool on_gpu : {true, false})
    dist::run_threads(2, [&](int rank, dist::ProcessGroup& pg) {
      const Device dev = on_gpu ? Device::cuda(0) : Device::cpu();
      Tensor x = Tensor::randn({2 + rank, 3, 4, 4}, 7 + rank, DType::F64).to(dev);
      x.set_requires_grad(true);
      Tensor w = Tensor::ones({3}, DType::F64, dev), b = Tensor::zeros({3}, DType::F64, dev);
      Tensor y = ops::sync_batch_norm2d(x, w, b, Tensor(), Tensor(), pg);
      autograd::backward({y}, {Tensor::randn(x.shape(), 9 + rank, DType::F64).to(dev)});
      auto v = y.to_double_vector();
      auto g = x.grad().to_double_vector();
      v.insert(v.end(), g.begin(), g.end());
      (on_gpu ? gpu : cpu)[rank] = v;
    });
  for (int r = 0; r < 2; ++r) EXPECT_LT(ddp::testing::max_relative_difference({gpu[r]}, {cpu[r]}), 1e-10);
}

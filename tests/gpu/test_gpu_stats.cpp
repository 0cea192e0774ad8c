// test_gpu_stats.cpp - the reducer's statistics on the GPU come from CUDA events (NCCL, world 1): the device
// clock is used, every bucket's collective starts after it became ready on the compute stream and ends after
// it started, exposed communication is within [0, step], the used-map's host copy is measured with
// find_unused_parameters, and with the Gloo-staged backend the host clock is kept. Skips without a GPU.
#include <gtest/gtest.h>

#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/init.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/loss.h"

using namespace ddp;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}
IterationStats one_step(std::shared_ptr<dist::ProcessGroup> pg, bool find_unused) {
  nn::manual_seed(3);
  auto model = std::make_shared<models::MLP>(models::MLPConfig{64, {256, 256}, 10, DType::F32});
  model->to(Device::cuda(0));
  DDPOptions o;
  o.first_bucket_mb = o.bucket_cap_mb = 0.05;  // several buckets
  o.find_unused_parameters = find_unused;
  DistributedDataParallel ddp(model, pg, o);
  IterationStats s;
  for (int it = 0; it < 3; ++it) {
    Tensor x = Tensor::randn({32, 64}, it).to(Device::cuda(0));
    Tensor y = Tensor::from_data<int64_t>(std::vector<int64_t>(32, 1), {32}).to(Device::cuda(0));
    autograd::backward(ops::cross_entropy(ddp.forward(x), y));
    s = ddp.reducer().last_stats();
  }
  return s;
}
}  // namespace

TEST(GpuStats, NcclStatisticsComeFromCudaEvents) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  dist::DistEnv env;
  auto ctx = dist::init_distributed(env, "nccl");
  for (bool find_unused : {false, true}) {
    IterationStats s = one_step(ctx.group, find_unused);
    EXPECT_TRUE(s.device_clock);
    ASSERT_GE(s.buckets.size(), 2u);
    for (const auto& b : s.buckets) {
      EXPECT_LE(b.ready_s, b.launched_s + 1e-6) << s.summary();
      EXPECT_LE(b.launched_s, b.completed_s) << s.summary();
    }
    EXPECT_GT(s.backward_compute_s, 0.0);
    EXPECT_GE(s.exposed_communication_s, 0.0);
    EXPECT_GE(s.communication_s, 0.0);
    if (find_unused) EXPECT_GT(s.used_map_sync_s, 0.0) << "the used-map's host copy is measured";
  }
}

TEST(GpuStats, GlooStagingKeepsTheHostClock) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  dist::run_threads(2, [&](int, dist::ProcessGroup& pg) {
    IterationStats s = one_step(borrow(pg), false);
    EXPECT_FALSE(s.device_clock);
    for (const auto& b : s.buckets) EXPECT_LE(b.launched_s, b.completed_s);
  });
}

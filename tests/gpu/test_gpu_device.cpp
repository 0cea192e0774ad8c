// test_gpu_device.cpp - the device a thread works on (issue 37 defect 5): allocating and freeing a tensor
// on another GPU leaves the caller's current device as it was (the allocator used to cudaSetDevice and never
// restore), and train's --device cuda:N wins over LOCAL_RANK. The guard and the device rule are checked on
// the CPU (DeviceGuard.*, DeviceForRank.*). The cross-device parts need two GPUs and skip on one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "models/train_setup.h"
#include "runtime/core/device.h"
#include "runtime/distributed/local_world.h"
#include "runtime/tensor/tensor.h"

using namespace ddp;

TEST(GpuDevice, AllocationAndFreeLeaveTheCallersDeviceCurrent) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  set_current_cuda_device(0);
  {
    Tensor t = Tensor::full({1024}, 1.0, DType::F32, Device::cuda(0));
    EXPECT_EQ(current_cuda_device(), 0);
  }
  EXPECT_EQ(current_cuda_device(), 0);
  if (cuda_device_count() < 2) GTEST_SKIP() << "skipped: the cross-device part needs 2 GPUs";
  {
    Tensor t = Tensor::empty({1024}, DType::F32, Device::cuda(1));
    EXPECT_EQ(current_cuda_device(), 0) << "allocating on cuda:1 moved this thread to cuda:1";
    set_current_cuda_device(0);
  }
  EXPECT_EQ(current_cuda_device(), 0) << "freeing on cuda:1 moved this thread to cuda:1";
  set_current_cuda_device(1);
  { Tensor t = Tensor::empty({1024}, DType::F32, Device::cuda(0)); }
  EXPECT_EQ(current_cuda_device(), 1);
  set_current_cuda_device(0);
}

TEST(GpuDevice, TrainsExplicitDeviceWinsOverLocalRank) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  if (cuda_device_count() < 2) GTEST_SKIP() << "skipped: needs 2 GPUs";
  ::setenv("LOCAL_RANK", "0", 1);
  models::TrainOptions o;
  o.model = "mlp";
  o.data = "synthetic";
  o.device = "cuda:1";
  o.quiet = true;
  o.synthetic_samples = 256;
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
    std::shared_ptr<dist::ProcessGroup> borrowed(&pg, [](dist::ProcessGroup*) {});
    models::TrainSetup s = models::set_up_training(o, borrowed);
    EXPECT_EQ(s.device, Device::cuda(1)) << "LOCAL_RANK=0 overrode --device cuda:1";
    EXPECT_EQ(current_cuda_device(), 1);
  });
  ::unsetenv("LOCAL_RANK");
  set_current_cuda_device(0);
}

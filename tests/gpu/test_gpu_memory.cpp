// test_gpu_memory.cpp - device_memory() (runtime/core/device_memory.h), the figure bench_e2e prints beside
// its memory account: on a GPU the pool's peak covers a 64 MiB tensor and the caller's device is left as it
// was; without one the reading is marked invalid. Never skips (the first GPU run counts skips as failures).
#include <gtest/gtest.h>

#include "runtime/core/device.h"
#include "runtime/core/device_memory.h"
#include "runtime/tensor/tensor.h"

using namespace ddp;

TEST(GpuMemory, PoolPeakCoversATensorAndTheReadingIsInvalidWithoutAGpu) {
  if (cuda_device_count() == 0) {
    EXPECT_FALSE(device_memory(0).valid);
    return;
  }
  const int64_t bytes = int64_t{64} << 20;
  const int before = current_cuda_device();
  {
    Tensor t = Tensor::zeros({bytes / 4}, DType::F32).to(Device::cuda(0));
    device_synchronize();
    const DeviceMemory m = device_memory(0);
    ASSERT_TRUE(m.valid);
    EXPECT_GE(m.pool_used_peak, bytes);
    EXPECT_GE(m.pool_reserved_peak, m.pool_used_peak);
    EXPECT_GE(m.device_used, bytes);
    EXPECT_GE(m.device_total, m.device_used);
  }
  EXPECT_EQ(current_cuda_device(), before);
  EXPECT_FALSE(device_memory(cuda_device_count()).valid) << "a device that does not exist";
}

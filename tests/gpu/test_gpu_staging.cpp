// test_gpu_staging.cpp - the Gloo CUDA staging path keeps a collective's buffers until its host-to-device
// copy ended even when the caller drops the tensor and the Work at once: memory the allocator hands out next
// is never overwritten by a late copy, and the parked stagings are released once their copies finished. Two
// ranks on one GPU. Skips without a GPU.
#include <gtest/gtest.h>

#include "runtime/distributed/comm_buffer_of.h"
#include "runtime/distributed/cuda/host_staging.h"
#include "runtime/distributed/local_world.h"

using namespace ddp;

TEST(GpuStaging, DroppedBuffersAreNotReusedWhileTheCopyRuns) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  const int64_t n = 1 << 20;
  dist::run_threads(2, [&](int, dist::ProcessGroup& pg) {
    for (int it = 0; it < 20; ++it) {
      {
        Tensor t = Tensor::full({n}, 1.0, DType::F32, Device::cuda(0));
        pg.allreduce(comm_buffer_of(t));  // Work and tensor dropped right away
      }
      Tensor u = Tensor::full({n}, 7.0, DType::F32, Device::cuda(0));  // may get the freed block
      device_synchronize();
      const auto v = u.to_double_vector();
      int64_t wrong = 0;
      for (double x : v) wrong += x != 7.0;
      ASSERT_EQ(wrong, 0) << "iteration " << it << ": a late staging copy overwrote reused memory";
    }
    pg.barrier()->wait();
  });
  device_synchronize();
  Tensor t = Tensor::full({16}, 1.0, DType::F32, Device::cuda(0));
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) { pg.allreduce(comm_buffer_of(t))->wait(); });
  device_synchronize();
  EXPECT_EQ(dist::cuda::HostStaging::parked(), 0u) << "finished stagings were not released";
}

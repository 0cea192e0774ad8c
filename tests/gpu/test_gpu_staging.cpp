// test_gpu_staging.cpp - the Gloo CUDA staging path keeps a collective's buffers until its host-to-device
// copy ended even when the caller drops the tensor and the Work at once: memory the allocator hands out next
// is never overwritten by a late copy, and the parked stagings are released once their copies finished. Two
// ranks on one GPU. In-place all-gather and reduce-scatter at every rank position (issue 37 defect 1).
// Skips without a GPU.
#include <gtest/gtest.h>

#include <vector>

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

// Issue 37 defect 1: an in-place all-gather through the staging path, where rank 0's input starts where its
// output starts (the old code reused the input's n-element pinned block as the world x n output block), and
// an in-place reduce-scatter, at every rank position of worlds 2-4, with a count that is not a power of two.
// The staging plan itself is checked on the CPU (StagingPlan.*, tests/distributed/test_staging_plan.cpp).
TEST(GpuStaging, InPlaceAllgatherAndReduceScatterAtEveryRankPosition) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  const int64_t n = 1000 + 7;
  for (int world = 2; world <= 4; ++world) {
    dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
      std::vector<double> mine(static_cast<size_t>(world * n), -1.0);
      for (int64_t i = 0; i < n; ++i) mine[static_cast<size_t>(rank * n + i)] = rank * 10000.0 + i;
      Tensor out = Tensor::from_vector(mine, {world * n}).to(Device::cuda(0));
      pg.allgather(comm_buffer_of(out.slice0(rank * n, (rank + 1) * n)), comm_buffer_of(out))->wait();
      const auto got = out.to_double_vector();
      for (int q = 0; q < world; ++q)
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(got[static_cast<size_t>(q * n + i)], q * 10000.0 + i)
              << "all-gather world " << world << " rank " << rank << ": element " << i << " of rank " << q;

      std::vector<double> ones(static_cast<size_t>(world * n));
      for (int64_t i = 0; i < world * n; ++i)
        ones[static_cast<size_t>(i)] = static_cast<double>(i % 97 + rank);
      Tensor in = Tensor::from_vector(ones, {world * n}).to(Device::cuda(0));
      pg.reduce_scatter(comm_buffer_of(in), comm_buffer_of(in.slice0(rank * n, (rank + 1) * n)))->wait();
      const auto rs = in.to_double_vector();
      for (int64_t i = 0; i < world * n; ++i) {
        const bool own = i >= rank * n && i < (rank + 1) * n;
        const double want = own ? world * static_cast<double>(i % 97) + world * (world - 1) / 2.0
                                : static_cast<double>(i % 97 + rank);
        ASSERT_EQ(rs[static_cast<size_t>(i)], want)
            << "reduce-scatter world " << world << " rank " << rank << ": element " << i;
      }
      pg.barrier()->wait();
    });
  }
}

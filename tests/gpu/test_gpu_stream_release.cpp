// test_gpu_stream_release.cpp - NCCL buffers go back to the allocator in stream order (issue 37 defect 3):
// ZeRO-3's pattern - allocate a unit, all-gather into it, drop it - repeated 64 times with no host wait, far
// faster than the NCCL watchdog's 50 ms tick. The pool's high-water mark must stay at a few units (each free
// waits for the comm stream, and the next allocation reuses the block in stream order), where the old code
// held every unit until the watchdog next looked. The bookkeeping is checked on the CPU too
// (StreamOrderedRelease.*). NCCL world 1 on GPU 0. Skips without a GPU.
#include <gtest/gtest.h>

#include "runtime/core/device.h"
#include "runtime/core/device_memory.h"
#include "runtime/distributed/comm_buffer_of.h"
#include "runtime/distributed/local_world.h"
#include "tests/gpu/nccl_world_one.h"

using namespace ddp;

TEST(GpuStreamRelease, GatheredUnitsDroppedBeforeTheWatchdogTickDoNotPileUp) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  dist::run_threads(
      1,
      [&](int, dist::ProcessGroup&, dist::Store& store) {
        auto pg = ddp::testing::nccl_world_one(store, "stream-release");
        const int64_t unit = int64_t{4} << 20;  // 16 MiB of float32
        Tensor shard = Tensor::full({unit}, 2.0, DType::F32, Device::cuda(0));
        device_synchronize();
        const int64_t base = device_memory(0).pool_used;
        reset_device_memory_peak(0);
        for (int i = 0; i < 64; ++i) {
          Tensor gathered = Tensor::empty({unit}, DType::F32, Device::cuda(0));
          // The caller's stream waits for the gather; the unit is used, then resharded: the last reference
          // goes, Work and all.
          pg->allgather(comm_buffer_of(shard), comm_buffer_of(gathered))->wait();
        }
        const DeviceMemory after = device_memory(0);
        device_synchronize();
        const int64_t unit_bytes = unit * 4;
        ASSERT_TRUE(after.valid);
        EXPECT_LE(after.pool_used_peak - base, 3 * unit_bytes)
            << "the pool's peak rose by " << (after.pool_used_peak - base) / unit_bytes
            << " units: gathered units outlived their drop (released on the watchdog's tick, not in stream "
               "order)";
        EXPECT_LE(device_memory(0).pool_used - base, unit_bytes) << "units still allocated after the loop";
      },
      dist::ProcessGroupOptions{});
}

// test_gpu_nccl_init.cpp - the non-blocking NCCL communicator creation ends with the clear error instead of a
// hang: two ranks on ONE GPU (NCCL refuses a duplicate GPU, or never forms the communicator) both fail within
// the group timeout with "nccl communicator creation of group ..." naming the rank. Skips with "skipped: no
// GPU".
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "runtime/distributed/local_world.h"
#include "runtime/distributed/process_group_factory.h"

using namespace ddp;

TEST(GpuNcclInit, TwoRanksOnOneGpuFailWithTheCreationErrorNotAHang) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  dist::ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(20);
  std::vector<std::string> errors(2);
  const auto t0 = std::chrono::steady_clock::now();
  dist::run_threads(
      2,
      [&](int rank, dist::ProcessGroup&, dist::Store& store) {
        dist::ProcessGroupOptions nccl = o;
        nccl.name = "dup-gpu";
        nccl.cuda_device = 0;  // both ranks on GPU 0
        dist::DistEnv env;
        env.rank = rank;
        env.world_size = 2;
        env.local_rank = rank;
        env.local_world_size = 2;
        try {
          dist::new_process_group(env, store, "nccl", nccl);
        } catch (const std::exception& e) {
          errors[rank] = e.what();
        }
      },
      o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 20 + 30) << "communicator creation was not bounded by the timeout";
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(
        errors[r].find("nccl communicator creation of group 'dup-gpu' failed on rank " + std::to_string(r)),
        std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
}

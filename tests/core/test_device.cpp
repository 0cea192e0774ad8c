// test_device.cpp - GPU discovery: a CUDA-enabled binary on a machine without a GPU reports zero GPUs.
#include <gtest/gtest.h>

#include "runtime/core/device.h"
#include "runtime/core/error.h"

using namespace ddp;

TEST(Device, CountIsZeroOrMoreAndNeverThrows) {
  int n = -1;
  EXPECT_NO_THROW(n = cuda_device_count());
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_FALSE(cuda_unavailable_reason().empty());
  }
}

TEST(Device, NoGpuMachineReportsZeroNotError) {
  // On this project's build machines there is no GPU (and no driver): the count must be 0, with a reason.
  if (cuda_device_count() > 0) GTEST_SKIP() << "skipped: a GPU is present";
  if (cuda_compiled())
    EXPECT_NE(cuda_unavailable_reason().find("CUDA"), std::string::npos) << cuda_unavailable_reason();
  else
    EXPECT_NE(cuda_unavailable_reason().find("without CUDA"), std::string::npos);
  EXPECT_TRUE(Device::parse("auto").is_cpu());
}

TEST(Device, ParseNamesTheBadValue) {
  EXPECT_TRUE(Device::parse("cpu").is_cpu());
  try {
    Device::parse("gpu0");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpu0"), std::string::npos);
  }
  if (cuda_device_count() == 0) {
    EXPECT_THROW(Device::parse("cuda:0"), Error);
  }
}

TEST(ErrorMacros, CarryFileAndLine) {
  try {
    DDP_CHECK(1 == 2, "one is not ", 2);
    FAIL();
  } catch (const Error& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("test_device.cpp:"), std::string::npos) << w;
    EXPECT_NE(w.find("one is not 2"), std::string::npos) << w;
  }
}

// train's device rule (device_for_rank, device.h): an explicit cuda:N wins over LOCAL_RANK; "cuda" and "auto"
// take GPU local_rank % count. Checked for every local rank, GPU count 0-4 and every explicit index, without
// a GPU (the count is a parameter). Before the fix LOCAL_RANK overrode cuda:N.
TEST(DeviceForRank, ExplicitIndexWinsOverLocalRankAndOthersFollowIt) {
  for (int gpus = 0; gpus <= 4; ++gpus) {
    for (int local = 0; local < 8; ++local) {
      const std::string at = " (gpus " + std::to_string(gpus) + ", local rank " + std::to_string(local) + ")";
      EXPECT_TRUE(device_for_rank("cpu", local, gpus).is_cpu()) << at;
      if (gpus == 0) {
        EXPECT_TRUE(device_for_rank("auto", local, gpus).is_cpu()) << at;
        EXPECT_THROW(device_for_rank("cuda", local, gpus), Error) << at;
        EXPECT_THROW(device_for_rank("cuda:0", local, gpus), Error) << at;
        continue;
      }
      const std::string own = Device::cuda(local % gpus).str();
      EXPECT_EQ(device_for_rank("auto", local, gpus).str(), own) << at;
      EXPECT_EQ(device_for_rank("cuda", local, gpus).str(), own) << at;
      for (int n = 0; n < gpus; ++n)
        EXPECT_EQ(device_for_rank("cuda:" + std::to_string(n), local, gpus).str(),
                  "cuda:" + std::to_string(n))
            << "--device cuda:" << n << at;
      EXPECT_THROW(device_for_rank("cuda:" + std::to_string(gpus), local, gpus), Error) << at;
    }
  }
  EXPECT_THROW(device_for_rank("cuda:-1", 0, 2), Error);
  EXPECT_THROW(device_for_rank("cuda", -1, 2), Error);
  EXPECT_THROW(device_for_rank("gpu", 0, 2), Error);
}

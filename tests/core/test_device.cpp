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

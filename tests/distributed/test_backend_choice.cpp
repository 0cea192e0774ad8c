// test_backend_choice.cpp - "--backend auto" follows the device of the parameters, not whether a GPU is
// visible: CPU parameters get a CPU backend (shm/hier/gloo) even on a GPU host (issue 10, defect 9).
#include <gtest/gtest.h>

#include "runtime/core/error.h"
#include "runtime/distributed/process_group_factory.h"

using namespace ddp;

TEST(BackendChoice, AutoFollowsTheParameterDevice) {
  EXPECT_EQ(dist::resolve_backend("auto", Device::cpu()), "cpu");  // shm on one host, else hier/gloo
  if (cuda_compiled()) {
    EXPECT_EQ(dist::resolve_backend("auto", Device::cuda(0)), "nccl");
  } else {
    EXPECT_THROW(dist::resolve_backend("auto", Device::cuda(0)), Error);
  }
  EXPECT_EQ(dist::resolve_backend("gloo", Device::cuda(0)), "gloo");  // an explicit choice stays
  EXPECT_THROW(dist::resolve_backend("mpi", Device::cpu()), Error);
}

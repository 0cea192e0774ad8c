// test_gpu_handles.cpp - cuBLAS and cuDNN handles are pooled across threads and destroyed (issue 37 defect
// 4): 12 threads one after another each run a matmul (cuBLAS) and a convolution (cuDNN) on GPU 0 and exit;
// they reuse one handle of each kind instead of making 12, and destroy_free_library_handles() destroys the
// handles no thread holds, after which a new matmul still works. The pool's bookkeeping is checked on the
// CPU too (HandlePool.*). Skips without a GPU.
#include <gtest/gtest.h>

#include <thread>

#include "runtime/core/cuda/handles.h"
#include "runtime/core/device.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/linalg.h"
#include "runtime/tensor/tensor.h"

using namespace ddp;

namespace {
void use_both_libraries() {
  Tensor a = Tensor::randn({64, 64}, 1).to(Device::cuda(0));
  Tensor b = Tensor::randn({64, 64}, 2).to(Device::cuda(0));
  Tensor c = ops::matmul(a, b);
  Tensor x = Tensor::randn({1, 2, 8, 8}, 3).to(Device::cuda(0));
  Tensor w = Tensor::randn({4, 2, 3, 3}, 4).to(Device::cuda(0));
  Tensor y = ops::conv2d(x, w, Tensor(), 1, 1);
  (void)c.to(Device::cpu());
  (void)y.to(Device::cpu());
}
}  // namespace

TEST(GpuHandles, ThreadsReuseHandlesAndFreeOnesAreDestroyed) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  std::thread([] { use_both_libraries(); }).join();  // the pools exist, one handle of each kind is free
  const auto before = cuda::library_handle_counts();
  for (int t = 0; t < 12; ++t) std::thread([] { use_both_libraries(); }).join();
  const auto after = cuda::library_handle_counts();
  EXPECT_EQ(after.cublas_created, before.cublas_created)
      << "a thread made a cuBLAS handle instead of reusing one";
  EXPECT_EQ(after.cudnn_created, before.cudnn_created)
      << "a thread made a cuDNN handle instead of reusing one";
  EXPECT_GE(after.cublas_free, 1u);
  EXPECT_GE(after.cudnn_free, 1u);
  cuda::destroy_free_library_handles();
  const auto gone = cuda::library_handle_counts();
  EXPECT_EQ(gone.cublas_free, 0u);
  EXPECT_EQ(gone.cudnn_free, 0u);
  EXPECT_EQ(gone.cublas_destroyed, after.cublas_destroyed + after.cublas_free);
  EXPECT_EQ(gone.cudnn_destroyed, after.cudnn_destroyed + after.cudnn_free);
  std::thread([] { use_both_libraries(); }).join();  // new handles after the destroy
  device_synchronize();
}

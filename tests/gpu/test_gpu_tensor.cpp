// test_gpu_tensor.cpp - the CUDA allocator and copies: round trips between devices, dtype conversion and
// fills on the GPU, in-place math. Skips with "skipped: no GPU" without a device.
#include <gtest/gtest.h>

#include "runtime/tensor/tensor.h"
#include "runtime/tensor/tensor_math.h"

using namespace ddp;

TEST(GpuTensor, RoundTripConvertFillAndMath) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  Tensor h = Tensor::randn({257}, 3);
  Tensor d = h.to(Device::cuda(0));
  EXPECT_TRUE(d.to(Device::cpu()).to_double_vector() == h.to_double_vector());
  Tensor bf = d.to(DType::BF16).to(DType::F32);
  auto a = bf.to_double_vector(), b = h.to_double_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-2 * (1 + std::abs(b[i])));
  Tensor z = Tensor::full({1000}, 1.5, DType::F32, Device::cuda(0));
  add_(z, z, 2.0);
  EXPECT_DOUBLE_EQ(z.to_double_vector()[999], 4.5);
  for (int i = 0; i < 1000; ++i)
    Tensor::empty({1 << 16}, DType::F32, Device::cuda(0));  // pool reuse, no leak
}

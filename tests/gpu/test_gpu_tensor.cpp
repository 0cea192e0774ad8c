// test_gpu_tensor.cpp - the CUDA allocator and copies: round trips between devices, dtype conversion and
// fills on the GPU, in-place math. Skips with "skipped: no GPU" without a device.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

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

// Every dtype pair converts on the GPU bit for bit as on the CPU (kernels/cuda/convert.cu converts directly,
// never through double): int64 values above 2^53, 2^60 + 2^36 + 1 to float32 (directly: up to 2^60 + 2^37;
// through double it would tie down to 2^60), negative and fractional values, bf16 rounding; sizes 0, 1, 257.
TEST(GpuTensor, EveryDtypePairConvertsAsTheCpuDoes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  const std::vector<int64_t> big = {(int64_t{1} << 53) + 1, (int64_t{1} << 60) + (int64_t{1} << 36) + 1, -7, 0,
                                    255, 256, -(int64_t{1} << 62) - 3};
  const std::vector<DType> dtypes = {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64, DType::U8};
  for (int64_t n : {0, 1, 257}) {
    std::vector<int64_t> ints(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ints[i] = big[static_cast<size_t>(i) % big.size()];
    const Tensor from_ints = Tensor::from_data(ints, {n});
    // fractions in [0, 250): in range for every integer type (C++ leaves an out-of-range float -> int
    // conversion undefined, and CPU and GPU do differ there)
    const Tensor from_floats = Tensor::uniform({n}, 7, 0.0, 250.0, DType::F64);
    auto is_float = [](DType t) { return t == DType::F32 || t == DType::F64 || t == DType::BF16; };
    for (const Tensor* seed : {&from_ints, &from_floats})
      for (DType st : dtypes)
        for (DType dt : dtypes) {
          if (seed == &from_ints && is_float(st) && !is_float(dt)) continue;  // +-2^62 as a float: out of range
          SCOPED_TRACE(std::string(dtype_name(st)) + " -> " + std::string(dtype_name(dt)) + " n " + std::to_string(n));
          const Tensor src = seed->to(st);  // on the CPU
          const Tensor cpu = src.to(dt);
          const Tensor gpu = src.to(Device::cuda(0)).to(dt).to(Device::cpu());
          ASSERT_EQ(gpu.nbytes(), cpu.nbytes());
          EXPECT_EQ(0, std::memcmp(gpu.raw_data(), cpu.raw_data(), cpu.nbytes())) << "bits differ from the CPU's";
        }
  }
}

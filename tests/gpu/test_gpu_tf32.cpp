// test_gpu_tf32.cpp - the TF32 switches reach cuBLAS and cuDNN (core/float32_math.h): a float32 GEMM and a
// float32 convolution are compared with float64 on the same GPU, with the switch off (IEEE float32: relative
// error near float32's 6e-8 per term) and on (TF32: inputs rounded to 10 mantissa bits, error ~1e-3 relative;
// the result must differ from the IEEE one, or the switch did nothing). The TF32 GEMM is held to its
// emulation: inputs rounded to 10 mantissa bits (round to nearest, ties away, as cvt.rna.tf32.f32), products
// summed in float64; a bound on the error from float64 alone failed on the first GPU run (2026-12-04, H200:
// 0.028 of max |ref|, which is what the emulation gives: these inputs cancel to max |ref| = 0.47 over K =
// 512). Skips with "skipped: no GPU".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/core/float32_math.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/linalg.h"

using namespace ddp;

namespace {
Tensor values(Shape shape, int salt) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = std::sin(0.731 * static_cast<double>(i + 1) * salt);
  return Tensor::from_vector(v, shape, DType::F64);
}
// max |a - b| / max |b|
double relative_error(const Tensor& a, const Tensor& b) {
  const auto x = a.to(Device::cpu()).to(DType::F64).to_double_vector();
  const auto y = b.to(Device::cpu()).to(DType::F64).to_double_vector();
  double err = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return err / scale;
}
// x as TF32: float32 with the low 13 mantissa bits rounded off (to nearest, ties away from zero).
double tf32(double x) {
  const float f = static_cast<float>(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x1000u) & 0xFFFFE000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}
// a (m x k) times b (k x n) with both rounded to TF32 first, in float64.
Tensor tf32_matmul_reference(const Tensor& a, const Tensor& b) {
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const auto x = a.to_double_vector(), y = b.to_double_vector();
  std::vector<double> out(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const double ap = tf32(x[static_cast<size_t>(i * k + p)]);
      for (int64_t j = 0; j < n; ++j)
        out[static_cast<size_t>(i * n + j)] += ap * tf32(y[static_cast<size_t>(p * n + j)]);
    }
  return Tensor::from_vector(out, {m, n}, DType::F64);
}
struct Restore {
  Float32MatmulPrecision matmul = float32_matmul_precision();
  bool cudnn = cudnn_allow_tf32();
  ~Restore() {
    set_float32_matmul_precision(matmul);
    set_cudnn_allow_tf32(cudnn);
  }
};
}  // namespace

TEST(GpuTf32, MatmulPrecisionHighestIsIeeeAndHighUsesTensorCores) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  Restore restore;
  const Device gpu = Device::cuda(0);
  const Tensor a = values({256, 512}, 1), b = values({512, 384}, 2);
  const Tensor ref = ops::matmul(a.to(gpu), b.to(gpu));  // float64 on the GPU
  const Tensor a32 = a.to(DType::F32).to(gpu), b32 = b.to(DType::F32).to(gpu);
  set_float32_matmul_precision(Float32MatmulPrecision::Highest);
  const Tensor ieee = ops::matmul(a32, b32);
  set_float32_matmul_precision(Float32MatmulPrecision::High);
  const Tensor tf32 = ops::matmul(a32, b32);
  const double e_ieee = relative_error(ieee, ref), e_tf32 = relative_error(tf32, ref);
  EXPECT_LT(e_ieee, 1e-5) << "float32 without TF32";
  EXPECT_LT(relative_error(tf32, tf32_matmul_reference(a, b)), 1e-4)
      << "TF32 GEMM vs its emulation (inputs rounded to 10 mantissa bits); from float64: " << e_tf32;
  EXPECT_GT(e_tf32, 4 * e_ieee) << "the TF32 switch changed nothing: cuBLAS did not use tensor cores";
}

TEST(GpuTf32, CudnnSwitchOffGivesAnIeeeFloat32Convolution) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  Restore restore;
  const Device gpu = Device::cuda(0);
  const Tensor x = values({4, 16, 20, 20}, 3), w = values({32, 16, 3, 3}, 4);
  const Tensor ref = ops::conv2d(x.to(gpu), w.to(gpu), Tensor(), 1, 1);
  set_cudnn_allow_tf32(false);
  const Tensor ieee = ops::conv2d(x.to(DType::F32).to(gpu), w.to(DType::F32).to(gpu), Tensor(), 1, 1);
  EXPECT_LT(relative_error(ieee, ref), 1e-5) << "float32 convolution with TF32 off";
  set_cudnn_allow_tf32(true);
  const Tensor tf32 = ops::conv2d(x.to(DType::F32).to(gpu), w.to(DType::F32).to(gpu), Tensor(), 1, 1);
  EXPECT_LT(relative_error(tf32, ref), 1e-2) << "float32 convolution with TF32 allowed (PyTorch's default)";
}

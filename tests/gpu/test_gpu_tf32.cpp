// test_gpu_tf32.cpp - the TF32 switches reach cuBLAS and cuDNN (core/float32_math.h): a float32 GEMM and a
// float32 convolution are compared with float64 on the same GPU, with the switch off (IEEE float32: relative
// error near float32's 6e-8 per term) and on (TF32: inputs rounded to 10 mantissa bits, error ~1e-3 relative;
// the result must differ from the IEEE one, or the switch did nothing). The TF32 GEMM is held per element to
// what 10-bit-mantissa inputs give (tf32_error_in_bounds below). Two bounds failed on the first GPU run
// (2026-12-04, H200): 1e-2 x max |ref| (cuBLAS gave 0.028, as inputs rounded to nearest do: these inputs
// cancel to max |ref| = 0.47 over K = 512), and 1e-4 from a round-to-nearest emulation (0.002: cuBLAS's
// rounding of the inputs is not documented). Skips with "skipped: no GPU".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
// How far a GEMM is from float64, in units of what 10-bit-mantissa inputs give: each product t_k = a_ik b_kj
// is off by up to 2^-10 |t_k| (both inputs rounded to 11 significant bits), the errors of K products add like
// a random walk, so |c_ij - ref_ij| stays within a few 2^-10 sqrt(sum_k t_k^2); the float32 sum adds far
// less. Returns the max over elements of |c - ref| / (2^-8 sqrt(sum t^2)): <= 1 for TF32 (rounding these
// inputs to nearest in float64 gives 0.30, truncating them 0.24; IEEE float32 3e-5), while a GEMM that drops
// or repeats a slice of K is off by hundreds.
double tf32_error_in_bounds(const Tensor& got, const Tensor& a, const Tensor& b) {
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const auto x = a.to_double_vector(), y = b.to_double_vector();
  const auto c = got.to(Device::cpu()).to(DType::F64).to_double_vector();
  double worst = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, squares = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double t = x[static_cast<size_t>(i * k + p)] * y[static_cast<size_t>(p * n + j)];
        ref += t;
        squares += t * t;
      }
      worst = std::max(worst, std::abs(c[static_cast<size_t>(i * n + j)] - ref) /
                                  (std::ldexp(1.0, -8) * std::sqrt(squares)));
    }
  return worst;
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
  EXPECT_LE(tf32_error_in_bounds(tf32, a, b), 1.0)
      << "TF32 GEMM beyond the bound of 10-bit-mantissa inputs; error from float64 " << e_tf32
      << " of max |ref|";
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

// test_clip_grad_norm.cpp - gradient-norm clipping on the CPU through the list arithmetic
// (runtime/tensor/multi_tensor_math.h): clip_grad_norm_ and clip_grad_norm_tensor_ give today's numbers bit
// for bit (a running float64 sum of squares in parameter order, one sqrt, a scale by max_norm / (norm + 1e-6)
// only when norm > max_norm), over float32 and float64 gradients, with undefined gradients skipped.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/optim/optimizer.h"
#include "runtime/tensor/multi_tensor_math.h"
#include "runtime/tensor/tensor_math.h"

using namespace ddp;

namespace {
Tensor param_with_grad(int64_t n, DType dtype, int salt, double scale) {
  std::vector<double> w(static_cast<size_t>(n), 0.0), g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    g[static_cast<size_t>(i)] = scale * std::sin(0.37 * static_cast<double>(i + 1) * salt);
  Tensor p = Tensor::from_vector(w, {n}, DType::F64).to(dtype);
  p.set_requires_grad(true);
  p.set_grad(Tensor::from_vector(g, {n}, DType::F64).to(dtype));
  return p;
}
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}
// The clip as written before the list arithmetic existed.
double reference_clip(const std::vector<Tensor>& params, double max_norm) {
  double total = 0;
  for (const Tensor& p : params)
    if (p.grad().defined()) total += sum_of_squares(p.grad());
  const double norm = std::sqrt(total);
  if (norm > max_norm && norm > 0) {
    const double scale = max_norm / (norm + 1e-6);
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (g.defined()) scale_(g, scale);
    }
  }
  return norm;
}
std::vector<Tensor> params_list() {
  std::vector<Tensor> ps = {param_with_grad(37, DType::F32, 1, 2.0), param_with_grad(1, DType::F64, 2, 1.0),
                            param_with_grad(300, DType::F32, 3, 0.5), param_with_grad(5, DType::F32, 4, 1.0)};
  ps[3].set_grad(Tensor());  // no gradient: skipped
  return ps;
}
}  // namespace

TEST(ClipGradNorm, CpuNumbersAreTheOldOnesBitForBit) {
  for (double max_norm : {0.5, 3.0, 1e9}) {
    std::vector<Tensor> a = params_list(), b = params_list(), c = params_list();
    const double want = reference_clip(a, max_norm);
    const double got = optim::clip_grad_norm_(b, max_norm);
    const Tensor got_tensor = optim::clip_grad_norm_tensor_(c, max_norm);
    EXPECT_EQ(std::memcmp(&want, &got, sizeof want), 0) << "max_norm " << max_norm;
    ASSERT_TRUE(got_tensor.device().is_cpu());
    EXPECT_EQ(got_tensor.dtype(), DType::F64);
    EXPECT_EQ(got_tensor.numel(), 1);
    EXPECT_EQ(got_tensor.item(), want);
    for (size_t i = 0; i < a.size(); ++i) {
      if (!a[i].grad().defined()) {
        EXPECT_FALSE(b[i].grad().defined());
        continue;
      }
      EXPECT_TRUE(same_bits(a[i].grad(), b[i].grad())) << "parameter " << i << ", max_norm " << max_norm;
      EXPECT_TRUE(same_bits(a[i].grad(), c[i].grad())) << "parameter " << i << ", max_norm " << max_norm;
    }
  }
}

TEST(ClipGradNorm, NoGradientsGiveNormZeroOnTheCpu) {
  Tensor p = Tensor::zeros({3}, DType::F32);
  const Tensor n = optim::clip_grad_norm_tensor_({p}, 1.0);
  EXPECT_TRUE(n.device().is_cpu());
  EXPECT_EQ(n.item(), 0.0);
}

TEST(ClipGradNorm, ListArithmeticChecksItsInputs) {
  Tensor f = Tensor::zeros({3}, DType::F32);
  EXPECT_THROW(sum_of_squares_tensor({Tensor()}, Device::cpu()), Error);
  EXPECT_THROW(sum_of_squares_tensor({Tensor::zeros({3}, DType::I64)}, Device::cpu()), Error);
  EXPECT_THROW(clip_by_sum_of_squares_({f}, Tensor::zeros({2}, DType::F64), 1.0, Device::cpu()), Error);
  EXPECT_THROW(clip_by_sum_of_squares_({f}, Tensor::zeros({1}, DType::F32), 1.0, Device::cpu()), Error);
  const Tensor s = sum_of_squares_tensor({Tensor::from_vector({3.0, 4.0}, {2}, DType::F64)}, Device::cpu());
  EXPECT_EQ(s.item(), 25.0);
}

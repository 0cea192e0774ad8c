// test_batchnorm.cpp - batch_norm2d against plain float64 loops written here: training forward with batch
// statistics, the running-stat update formula (unbiased variance, momentum), evaluation with running stats,
// gradcheck in both modes, float32 vs float64, buffers left alone by backward, bad-input errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/autograd/engine.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/batchnorm.h"
#include "tests/support/gradcheck.h"

using namespace ddp;
using ddp::testing::all_close;
using ddp::testing::gradcheck;

namespace {

struct BnCase {
  int64_t n, c, h, w;
};
const std::vector<BnCase> kCases = {{2, 3, 5, 7}, {1, 2, 3, 1}, {4, 1, 1, 1}, {3, 4, 2, 3}, {2, 1, 1, 2}};

std::string describe(const BnCase& b) {
  return "x (" + std::to_string(b.n) + "," + std::to_string(b.c) + "," + std::to_string(b.h) + "," +
         std::to_string(b.w) + ")";
}

// Per-channel batch mean and biased variance of x (N, C, H, W).
void reference_stats(const BnCase& b, const std::vector<double>& x, std::vector<double>& mean,
                     std::vector<double>& var) {
  const int64_t s = b.h * b.w, m = b.n * s;
  mean.assign(b.c, 0.0);
  var.assign(b.c, 0.0);
  for (int64_t c = 0; c < b.c; ++c) {
    for (int64_t n = 0; n < b.n; ++n)
      for (int64_t i = 0; i < s; ++i) mean[c] += x[(n * b.c + c) * s + i];
    mean[c] /= double(m);
    for (int64_t n = 0; n < b.n; ++n)
      for (int64_t i = 0; i < s; ++i) var[c] += std::pow(x[(n * b.c + c) * s + i] - mean[c], 2);
    var[c] /= double(m);
  }
}

// y = (x - mean) / sqrt(var + eps) * weight + bias, per channel.
std::vector<double> reference_normalize(const BnCase& b, const std::vector<double>& x,
                                        const std::vector<double>& mean, const std::vector<double>& var,
                                        const std::vector<double>& weight, const std::vector<double>& bias,
                                        double eps) {
  const int64_t s = b.h * b.w;
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < b.n; ++n)
    for (int64_t c = 0; c < b.c; ++c)
      for (int64_t i = 0; i < s; ++i) {
        const int64_t k = (n * b.c + c) * s + i;
        y[k] = (x[k] - mean[c]) / std::sqrt(var[c] + eps) * weight[c] + bias[c];
      }
  return y;
}

Tensor positive(const Shape& shape, uint64_t seed) {
  return Tensor::uniform(shape, seed, 0.5, 2.0, DType::F64);
}

}  // namespace

TEST(BatchNorm2d, TrainingForwardAndRunningStatsMatchFormula) {
  uint64_t seed = 1;
  const double momentum = 0.3, eps = 1e-3;
  for (const BnCase& b : kCases) {
    SCOPED_TRACE(describe(b));
    Tensor x = Tensor::randn({b.n, b.c, b.h, b.w}, seed++, DType::F64, 2.0);
    Tensor weight = Tensor::randn({b.c}, seed++, DType::F64);
    Tensor bias = Tensor::randn({b.c}, seed++, DType::F64);
    Tensor running_mean = Tensor::randn({b.c}, seed++, DType::F64);
    Tensor running_var = positive({b.c}, seed++);
    const std::vector<double> rm0 = running_mean.to_double_vector(), rv0 = running_var.to_double_vector();

    Tensor y = ops::batch_norm2d(x, weight, bias, running_mean, running_var, true, momentum, eps);

    std::vector<double> mean, var;
    reference_stats(b, x.to_double_vector(), mean, var);
    EXPECT_TRUE(all_close(y,
                          reference_normalize(b, x.to_double_vector(), mean, var, weight.to_double_vector(),
                                              bias.to_double_vector(), eps),
                          1e-12, 1e-12));
    const double m = double(b.n * b.h * b.w);
    std::vector<double> rm(b.c), rv(b.c);
    for (int64_t c = 0; c < b.c; ++c) {
      rm[c] = (1 - momentum) * rm0[c] + momentum * mean[c];
      rv[c] = (1 - momentum) * rv0[c] + momentum * var[c] * m / (m - 1);  // unbiased
    }
    EXPECT_TRUE(all_close(running_mean, rm, 1e-12, 1e-12));
    EXPECT_TRUE(all_close(running_var, rv, 1e-12, 1e-12));
  }
}

TEST(BatchNorm2d, DefaultMomentumAndEpsAreTorchs) {
  Tensor x = Tensor::randn({2, 2, 3, 3}, 5, DType::F64);
  Tensor rm = Tensor::zeros({2}, DType::F64), rv = Tensor::ones({2}, DType::F64);
  ops::batch_norm2d(x, Tensor(), Tensor(), rm, rv, true);
  std::vector<double> mean, var;
  reference_stats({2, 2, 3, 3}, x.to_double_vector(), mean, var);
  EXPECT_TRUE(all_close(rm, {0.1 * mean[0], 0.1 * mean[1]}, 1e-14));
  EXPECT_TRUE(all_close(rv, {0.9 + 0.1 * var[0] * 18 / 17, 0.9 + 0.1 * var[1] * 18 / 17}, 1e-14));
  // eval with running stats mean 0, var 1: y = x / sqrt(1 + 1e-5)
  Tensor y = ops::batch_norm2d(x, Tensor(), Tensor(), Tensor::zeros({2}, DType::F64),
                               Tensor::ones({2}, DType::F64), false);
  std::vector<double> expected = x.to_double_vector();
  for (double& v : expected) v /= std::sqrt(1 + 1e-5);
  EXPECT_TRUE(all_close(y, expected, 1e-14));
}

TEST(BatchNorm2d, RunningStatsUpdateUnderNoGradToo) {
  Tensor x = Tensor::randn({2, 3, 2, 2}, 9, DType::F64);
  Tensor rm = Tensor::zeros({3}, DType::F64), rv = Tensor::ones({3}, DType::F64);
  autograd::NoGradGuard no_grad;
  Tensor y = ops::batch_norm2d(x, Tensor(), Tensor(), rm, rv, true, 1.0);  // momentum 1: running = batch
  std::vector<double> mean, var;
  reference_stats({2, 3, 2, 2}, x.to_double_vector(), mean, var);
  for (double& v : var) v *= 8.0 / 7.0;
  EXPECT_TRUE(all_close(rm, mean, 1e-14));
  EXPECT_TRUE(all_close(rv, var, 1e-14));
  EXPECT_EQ(y.grad_fn(), nullptr);
}

TEST(BatchNorm2d, EvalUsesRunningStatsAndLeavesThemAlone) {
  uint64_t seed = 20;
  for (const BnCase& b : kCases) {
    SCOPED_TRACE(describe(b));
    Tensor x = Tensor::randn({b.n, b.c, b.h, b.w}, seed++, DType::F64);
    Tensor weight = Tensor::randn({b.c}, seed++, DType::F64);
    Tensor bias = Tensor::randn({b.c}, seed++, DType::F64);
    Tensor rm = Tensor::randn({b.c}, seed++, DType::F64);
    Tensor rv = positive({b.c}, seed++);
    const std::vector<double> rm0 = rm.to_double_vector(), rv0 = rv.to_double_vector();
    Tensor y = ops::batch_norm2d(x, weight, bias, rm, rv, false, 0.1, 1e-5);
    EXPECT_TRUE(all_close(y,
                          reference_normalize(b, x.to_double_vector(), rm0, rv0, weight.to_double_vector(),
                                              bias.to_double_vector(), 1e-5),
                          1e-12, 1e-12));
    EXPECT_TRUE(all_close(rm, rm0, 0.0));
    EXPECT_TRUE(all_close(rv, rv0, 0.0));
  }
}

TEST(BatchNorm2d, GradcheckTraining) {
  uint64_t seed = 40;
  for (const BnCase& b : kCases) {
    SCOPED_TRACE(describe(b));
    Tensor x = ddp::testing::random_f64({b.n, b.c, b.h, b.w}, seed++);
    Tensor weight = ddp::testing::random_f64({b.c}, seed++);
    Tensor bias = ddp::testing::random_f64({b.c}, seed++);
    Tensor rm = Tensor::zeros({b.c}, DType::F64), rv = Tensor::ones({b.c}, DType::F64);
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) { return ops::batch_norm2d(in[0], in[1], in[2], rm, rv, true); },
        {x, weight, bias}, 1e-6, 1e-6, 1e-5));
  }
  // without affine parameters and without running buffers
  Tensor x = ddp::testing::random_f64({2, 3, 2, 3}, 99);
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& in) {
        return ops::batch_norm2d(in[0], Tensor(), Tensor(), Tensor(), Tensor(), true);
      },
      {x}));
}

TEST(BatchNorm2d, GradcheckEval) {
  uint64_t seed = 60;
  for (const BnCase& b : kCases) {
    SCOPED_TRACE(describe(b));
    Tensor x = ddp::testing::random_f64({b.n, b.c, b.h, b.w}, seed++);
    Tensor weight = ddp::testing::random_f64({b.c}, seed++);
    Tensor bias = ddp::testing::random_f64({b.c}, seed++);
    Tensor rm = Tensor::randn({b.c}, seed++, DType::F64), rv = positive({b.c}, seed++);
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) { return ops::batch_norm2d(in[0], in[1], in[2], rm, rv, false); },
        {x, weight, bias}));
  }
}

TEST(BatchNorm2d, Float32MatchesFloat64ForwardAndBackward) {
  const BnCase b{2, 3, 5, 7};
  Tensor x64 = ddp::testing::random_f64({b.n, b.c, b.h, b.w}, 70);
  Tensor w64 = ddp::testing::random_f64({b.c}, 71);
  Tensor b64 = ddp::testing::random_f64({b.c}, 72);
  Tensor x32 = x64.detach().to(DType::F32).set_requires_grad(true);
  Tensor w32 = w64.detach().to(DType::F32).set_requires_grad(true);
  Tensor b32 = b64.detach().to(DType::F32).set_requires_grad(true);
  Tensor rm64 = Tensor::zeros({b.c}, DType::F64), rv64 = Tensor::ones({b.c}, DType::F64);
  Tensor rm32 = rm64.to(DType::F32), rv32 = rv64.to(DType::F32);
  Tensor y64 = ops::batch_norm2d(x64, w64, b64, rm64, rv64, true);
  Tensor y32 = ops::batch_norm2d(x32, w32, b32, rm32, rv32, true);
  EXPECT_TRUE(all_close(y32, y64, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(rm32, rm64, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(rv32, rv64, 1e-6, 1e-6));
  Tensor dy = Tensor::randn(y64.shape(), 73, DType::F64);
  autograd::backward({y64}, {dy});
  autograd::backward({y32}, {dy.to(DType::F32)});
  EXPECT_TRUE(all_close(x32.grad(), x64.grad(), 1e-4, 1e-4));
  EXPECT_TRUE(all_close(w32.grad(), w64.grad(), 1e-4, 1e-4));
  EXPECT_TRUE(all_close(b32.grad(), b64.grad(), 1e-4, 1e-4));
}

TEST(BatchNorm2d, BackwardLeavesRunningStatsAndGivesThemNoGradient) {
  Tensor x = ddp::testing::random_f64({2, 2, 3, 3}, 80);
  Tensor rm = Tensor::zeros({2}, DType::F64), rv = Tensor::ones({2}, DType::F64);
  Tensor y = ops::batch_norm2d(x, Tensor(), Tensor(), rm, rv, true);
  const std::vector<double> rm1 = rm.to_double_vector(), rv1 = rv.to_double_vector();
  autograd::backward({y}, {Tensor::randn(y.shape(), 81, DType::F64)});
  EXPECT_TRUE(all_close(rm, rm1, 0.0));
  EXPECT_TRUE(all_close(rv, rv1, 0.0));
  EXPECT_FALSE(rm.grad().defined());
  EXPECT_FALSE(rv.grad().defined());
  ASSERT_TRUE(x.grad().defined());
  // training-mode dx sums to zero per channel (the batch mean is subtracted)
  std::vector<double> g = x.grad().to_double_vector();
  for (int c = 0; c < 2; ++c) {
    double s = 0;
    for (int n = 0; n < 2; ++n)
      for (int i = 0; i < 9; ++i) s += g[(n * 2 + c) * 9 + i];
    EXPECT_NEAR(s, 0.0, 1e-12);
  }
}

TEST(BatchNorm2d, BadInputsRaiseErrors) {
  Tensor x = Tensor::zeros({2, 3, 2, 2}, DType::F64);
  Tensor v3 = Tensor::ones({3}, DType::F64), v2 = Tensor::ones({2}, DType::F64);
  EXPECT_THROW(ops::batch_norm2d(x, v2, v3, v3, v3, true), Error);                 // weight size
  EXPECT_THROW(ops::batch_norm2d(x, v3, v3, Tensor(), Tensor(), false), Error);    // eval needs buffers
  EXPECT_THROW(ops::batch_norm2d(x, v3, v3, v3, Tensor(), true), Error);           // one buffer only
  EXPECT_THROW(ops::batch_norm2d(x, v3.to(DType::F32), v3, v3, v3, true), Error);  // dtype
  EXPECT_THROW(ops::batch_norm2d(Tensor::zeros({1, 3, 1, 1}, DType::F64), v3, v3, v3, v3, true),
               Error);  // 1 value
  EXPECT_THROW(ops::batch_norm2d(Tensor::zeros({2, 3, 4}, DType::F64), v3, v3, v3, v3, true), Error);  // 3-D
  Tensor rm_grad = Tensor::zeros({3}, DType::F64).set_requires_grad(true);
  EXPECT_THROW(ops::batch_norm2d(x, v3, v3, rm_grad, v3, true), Error);       // buffer needs grad
  EXPECT_THROW(ops::batch_norm2d(x, v3, v3, v3, v3, true, 0.1, 0.0), Error);  // eps 0
  // eval mode with a single value per channel is fine
  EXPECT_NO_THROW(ops::batch_norm2d(Tensor::zeros({1, 3, 1, 1}, DType::F64), v3, v3, v3, v3, false));
}

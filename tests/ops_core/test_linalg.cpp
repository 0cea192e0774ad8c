// test_linalg.cpp - matmul (2-D, batched, shared 2-D b) and linear: forward against plain float64 loops,
// float32 against float64, gradients by finite differences, and the error messages for bad shapes.
#include <gtest/gtest.h>

#include "runtime/autograd/engine.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/reduce.h"
#include "tests/support/gradcheck.h"

using namespace ddp;
using ddp::testing::all_close;
using ddp::testing::gradcheck;
using ddp::testing::random_f64;

namespace {
// C[b] = A[b] B[b] (or B shared) with plain loops; shapes (batch, M, K) x (batch or 1, K, N).
std::vector<double> reference_matmul(const std::vector<double>& a, const std::vector<double>& b,
                                     int64_t batch, int64_t M, int64_t K, int64_t N, bool shared_b) {
  std::vector<double> c(static_cast<size_t>(batch * M * N), 0.0);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += a[(i * M + m) * K + k] * b[((shared_b ? 0 : i) * K + k) * N + n];
        c[(i * M + m) * N + n] = s;
      }
  return c;
}

// y[r, o] = sum_i x[r, i] w[o, i] + bias[o]
std::vector<double> reference_linear(const std::vector<double>& x, const std::vector<double>& w,
                                     const std::vector<double>* bias, int64_t rows, int64_t in, int64_t out) {
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = bias ? (*bias)[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

struct MatmulCase {
  Shape a, b;
};
}  // namespace

TEST(Matmul, ForwardMatchesLoops) {
  const std::vector<MatmulCase> cases = {{{3, 5}, {5, 4}},
                                         {{1, 1}, {1, 1}},
                                         {{7, 1}, {1, 3}},
                                         {{2, 3, 4}, {2, 4, 5}},
                                         {{2, 1, 3, 2}, {2, 1, 2, 3}},
                                         {{4, 3, 2}, {2, 6}},
                                         {{2, 2, 3, 5}, {5, 1}},
                                         {{1, 17, 9}, {1, 9, 13}}};
  uint64_t seed = 1;
  for (const auto& c : cases) {
    Tensor a = random_f64(c.a, seed++, false), b = random_f64(c.b, seed++, false);
    const bool shared = c.b.size() == 2;
    const int64_t M = c.a[c.a.size() - 2], K = c.a.back(), N = c.b.back();
    const int64_t batch = a.numel() / (M * K);
    Tensor y = ops::matmul(a, b);
    Shape expect_shape = c.a;
    expect_shape.back() = N;
    EXPECT_EQ(y.shape(), expect_shape);
    EXPECT_TRUE(
        all_close(y, reference_matmul(a.to_double_vector(), b.to_double_vector(), batch, M, K, N, shared),
                  1e-12, 1e-12))
        << shape_str(c.a) << " x " << shape_str(c.b);
  }
}

TEST(Matmul, Float32MatchesFloat64) {
  Tensor a = Tensor::randn({3, 33, 65}, 5, DType::F64), b = Tensor::randn({3, 65, 17}, 6, DType::F64);
  Tensor y64 = ops::matmul(a, b);
  Tensor y32 = ops::matmul(a.to(DType::F32), b.to(DType::F32));
  EXPECT_EQ(y32.dtype(), DType::F32);
  EXPECT_TRUE(all_close(y32, y64, 1e-4, 1e-4));  // K = 65 float32 products: ~1e-6 relative per term
}

TEST(Matmul, Gradients) {
  const std::vector<MatmulCase> cases = {{{3, 5}, {5, 4}},
                                         {{1, 1}, {1, 1}},
                                         {{2, 3, 4}, {2, 4, 1}},
                                         {{2, 1, 3, 2}, {2, 1, 2, 3}},
                                         {{2, 3, 2}, {2, 5}}};
  uint64_t seed = 100;
  for (const auto& c : cases) {
    Tensor a = random_f64(c.a, seed++), b = random_f64(c.b, seed++);
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); }, {a, b}))
        << shape_str(c.a) << " x " << shape_str(c.b);
  }
}

TEST(Matmul, GradientOnlyForInputsThatNeedIt) {
  Tensor a = random_f64({3, 4}, 1, false), b = random_f64({4, 2}, 2, true);
  autograd::backward(ops::sum(ops::matmul(a, b)));
  EXPECT_FALSE(a.grad().defined());
  ASSERT_TRUE(b.grad().defined());
  // d sum(AB) / dB[k, n] = sum_m A[m, k]
  std::vector<double> av = a.to_double_vector(), expect(8);
  for (int k = 0; k < 4; ++k)
    for (int n = 0; n < 2; ++n) expect[k * 2 + n] = av[0 * 4 + k] + av[1 * 4 + k] + av[2 * 4 + k];
  EXPECT_TRUE(all_close(b.grad(), expect, 1e-12));
}

TEST(Matmul, BadShapesNameTheProblem) {
  Tensor a = Tensor::zeros({2, 3}, DType::F64), b = Tensor::zeros({4, 5}, DType::F64);
  try {
    ops::matmul(a, b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inner dimensions"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 4})), Error);  // batch dims differ
  EXPECT_THROW(ops::matmul(Tensor::zeros({3}), Tensor::zeros({3, 4})), Error);           // 1-D a
  EXPECT_THROW(ops::matmul(Tensor::zeros({2, 3}), Tensor::zeros({3, 4}, DType::F64)),
               Error);  // dtypes differ
}

TEST(Linear, ForwardMatchesLoops) {
  struct Case {
    Shape x;
    int64_t out;
    bool bias;
  };
  const std::vector<Case> cases = {{{4, 3}, 5, true}, {{1, 1}, 1, true},       {{2, 3, 7}, 2, false},
                                   {{5}, 3, true},    {{2, 1, 4, 3}, 6, true}, {{9, 13}, 1, false}};
  uint64_t seed = 10;
  for (const auto& c : cases) {
    const int64_t in = c.x.back();
    Tensor x = random_f64(c.x, seed++, false), w = random_f64({c.out, in}, seed++, false);
    Tensor b = c.bias ? random_f64({c.out}, seed++, false) : Tensor();
    Tensor y = ops::linear(x, w, b);
    Shape expect_shape = c.x;
    expect_shape.back() = c.out;
    EXPECT_EQ(y.shape(), expect_shape);
    std::vector<double> bv = c.bias ? b.to_double_vector() : std::vector<double>();
    EXPECT_TRUE(all_close(y,
                          reference_linear(x.to_double_vector(), w.to_double_vector(), c.bias ? &bv : nullptr,
                                           x.numel() / in, in, c.out),
                          1e-12, 1e-12))
        << shape_str(c.x);
  }
}

TEST(Linear, Float32MatchesFloat64) {
  Tensor x = Tensor::randn({6, 5, 100}, 1, DType::F64), w = Tensor::randn({31, 100}, 2, DType::F64, 0.1);
  Tensor b = Tensor::randn({31}, 3, DType::F64);
  Tensor y64 = ops::linear(x, w, b);
  Tensor y32 = ops::linear(x.to(DType::F32), w.to(DType::F32), b.to(DType::F32));
  EXPECT_TRUE(all_close(y32, y64, 1e-5, 1e-4));
}

TEST(Linear, Gradients) {
  struct Case {
    Shape x;
    int64_t out;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{4, 3}, 5, true}, {{1, 1}, 1, true}, {{2, 3, 2}, 3, false}, {{3}, 2, true}, {{2, 1, 2, 3}, 1, true}};
  uint64_t seed = 200;
  for (const auto& c : cases) {
    Tensor x = random_f64(c.x, seed++), w = random_f64({c.out, c.x.back()}, seed++);
    if (c.bias) {
      Tensor b = random_f64({c.out}, seed++);
      EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1], in[2]); },
                            {x, w, b}))
          << shape_str(c.x);
    } else {
      EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1]); }, {x, w}))
          << shape_str(c.x);
    }
  }
}

TEST(Linear, WeightGradientOnlyWhenInputIsData) {
  // The first layer of a network: x is data, only weight and bias need gradients.
  Tensor x = random_f64({5, 3}, 1, false), w = random_f64({2, 3}, 2), b = random_f64({2}, 3);
  autograd::backward(ops::sum(ops::linear(x, w, b)));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(all_close(b.grad(), {5, 5}, 1e-12));  // d sum / d b[o] = number of rows
  std::vector<double> xv = x.to_double_vector(), expect(6);
  for (int o = 0; o < 2; ++o)
    for (int i = 0; i < 3; ++i) {
      double s = 0;
      for (int r = 0; r < 5; ++r) s += xv[r * 3 + i];
      expect[o * 3 + i] = s;
    }
  EXPECT_TRUE(all_close(w.grad(), expect, 1e-12));
}

TEST(Linear, BadShapesNameTheProblem) {
  Tensor x = Tensor::zeros({4, 3}), w = Tensor::zeros({5, 2});
  try {
    ops::linear(x, w);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::linear(Tensor::zeros({4, 3}), Tensor::zeros({5, 3}), Tensor::zeros({4})), Error);
  EXPECT_THROW(ops::linear(Tensor::zeros({4, 3}), Tensor::zeros({3})), Error);
}

// test_softmax.cpp - softmax and log_softmax: a plain float64 reference, stability on large inputs,
// gradcheck over several shapes, float32 vs float64, CUDA parity.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/ops/softmax.h"
#include "tests/ops_nn/ops_nn_test_util.h"

using namespace ddp;
using namespace ddp::testing;

namespace {
// Row-wise softmax (or its log) of a (rows, cols) array, computed plainly in double.
std::vector<double> reference(const std::vector<double>& x, int64_t cols, bool log) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r * cols < x.size(); ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, x[r * cols + c]);
    for (int64_t c = 0; c < cols; ++c) s += std::exp(x[r * cols + c] - m);
    for (int64_t c = 0; c < cols; ++c) {
      const double z = x[r * cols + c] - m;
      y[r * cols + c] = log ? z - std::log(s) : std::exp(z) / s;
    }
  }
  return y;
}
const std::vector<Shape> kShapes = {{7}, {3, 5}, {2, 3, 4}, {1, 1}, {4, 1}, {2, 1, 9}};
}  // namespace

TEST(Softmax, MatchesReference) {
  for (const Shape& s : kShapes) {
    Tensor x = random_f64(s, 11, false);
    EXPECT_TRUE(all_close(ops::softmax(x), reference(values(x), s.back(), false), 1e-14, 1e-12))
        << shape_str(s);
    EXPECT_TRUE(all_close(ops::log_softmax(x), reference(values(x), s.back(), true), 1e-14, 1e-12))
        << shape_str(s);
  }
}

TEST(Softmax, RowsSumToOne) {
  Tensor y = ops::softmax(random_f64({6, 13}, 3, false) * 10.0);
  std::vector<double> v = values(y);
  for (int r = 0; r < 6; ++r) {
    double s = 0;
    for (int c = 0; c < 13; ++c) s += v[r * 13 + c];
    EXPECT_NEAR(s, 1.0, 1e-12);
  }
}

TEST(Softmax, LargeInputsStayFinite) {
  // exp(1000) overflows; shifting every entry by a constant must not change the result.
  Tensor small = Tensor::from_vector({0.5, -1.0, 2.0, 0.0}, {1, 4}, DType::F32);
  Tensor big = small + 1000.0;
  for (bool log : {false, true}) {
    Tensor a = log ? ops::log_softmax(big) : ops::softmax(big);
    Tensor b = log ? ops::log_softmax(small) : ops::softmax(small);
    for (double v : values(a)) EXPECT_TRUE(std::isfinite(v));
    EXPECT_TRUE(all_close(a, b, 1e-5, 1e-5));
  }
}

TEST(Softmax, Gradcheck) {
  for (const Shape& s : kShapes) {
    EXPECT_TRUE(
        gradcheck([](const std::vector<Tensor>& in) { return ops::softmax(in[0]); }, {random_f64(s, 5)}))
        << shape_str(s);
    EXPECT_TRUE(
        gradcheck([](const std::vector<Tensor>& in) { return ops::log_softmax(in[0]); }, {random_f64(s, 6)}))
        << shape_str(s);
  }
}

TEST(Softmax, Float32MatchesFloat64) {
  Tensor x = random_f64({5, 37}, 8, false) * 4.0;
  EXPECT_TRUE(float32_matches_float64([](const std::vector<Tensor>& in) { return ops::softmax(in[0]); }, {x},
                                      1e-6, 1e-5));
  EXPECT_TRUE(float32_matches_float64([](const std::vector<Tensor>& in) { return ops::log_softmax(in[0]); },
                                      {x}, 1e-5, 1e-5));
}

TEST(Softmax, RejectsScalar) { EXPECT_THROW(ops::softmax(Tensor::zeros({})), Error); }

TEST(Softmax, CudaMatchesCpu) {
  DDP_SKIP_WITHOUT_GPU();
  // float32 on both sides: relative error bound 1e-5 (different summation orders).
  for (const Shape& s : std::vector<Shape>{{3, 5}, {4, 1000}, {2, 3, 33}}) {
    Tensor x = random_f64(s, 21) * 3.0;
    expect_cuda_matches_cpu([](const std::vector<Tensor>& in) { return ops::softmax(in[0]); }, {x}, 1e-6,
                            1e-5);
    expect_cuda_matches_cpu([](const std::vector<Tensor>& in) { return ops::log_softmax(in[0]); }, {x}, 1e-5,
                            1e-5);
  }
}

// test_layernorm.cpp - layer_norm against a plain float64 reference; gradcheck of x, weight and bias;
// float32 vs float64; bad parameter shapes; CUDA parity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "runtime/ops/layernorm.h"
#include "tests/ops_nn/ops_nn_test_util.h"

using namespace ddp;
using namespace ddp::testing;

namespace {
std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& w,
                              const std::vector<double>& b, double eps) {
  const size_t cols = w.size();
  std::vector<double> y(x.size());
  for (size_t r = 0; r * cols < x.size(); ++r) {
    double mean = 0, var = 0;
    for (size_t c = 0; c < cols; ++c) mean += x[r * cols + c];
    mean /= cols;
    for (size_t c = 0; c < cols; ++c) var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
    var /= cols;
    for (size_t c = 0; c < cols; ++c)
      y[r * cols + c] = (x[r * cols + c] - mean) / std::sqrt(var + eps) * w[c] + b[c];
  }
  return y;
}
const std::vector<Shape> kShapes = {{1, 1}, {3, 5}, {2, 3, 8}, {4, 1, 7}, {9}};
}  // namespace

TEST(LayerNorm, MatchesReference) {
  for (const Shape& s : kShapes) {
    const int64_t c = s.back();
    Tensor x = random_f64(s, 1, false) * 2.0 + 0.5, w = random_f64({c}, 2, false),
           b = random_f64({c}, 3, false);
    for (double eps : {1e-5, 0.1}) {
      EXPECT_TRUE(all_close(ops::layer_norm(x, w, b, eps), reference(values(x), values(w), values(b), eps),
                            1e-12, 1e-12))
          << shape_str(s) << " eps " << eps;
    }
  }
}

TEST(LayerNorm, Gradcheck) {
  for (const Shape& s : kShapes) {
    const int64_t c = s.back();
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::layer_norm(in[0], in[1], in[2]); },
                          {random_f64(s, 4), random_f64({c}, 5), random_f64({c}, 6)}, 1e-6, 1e-5, 1e-4))
        << shape_str(s);
  }
}

TEST(LayerNorm, GradOnlyForInputsThatNeedIt) {
  Tensor x = random_f64({3, 4}, 1), w = random_f64({4}, 2, false), b = random_f64({4}, 3);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::layer_norm(in[0], in[1], in[2]); },
                        {x, w, b}));
  EXPECT_FALSE(w.grad().defined());
}

TEST(LayerNorm, Float32MatchesFloat64) {
  EXPECT_TRUE(float32_matches_float64(
      [](const std::vector<Tensor>& in) { return ops::layer_norm(in[0], in[1], in[2]); },
      {random_f64({6, 96}, 1, false) * 3.0 + 2.0, random_f64({96}, 2, false), random_f64({96}, 3, false)},
      1e-5, 1e-5));
}

TEST(LayerNorm, RejectsBadParameters) {
  Tensor x = random_f64({2, 4}, 1, false);
  EXPECT_THROW(ops::layer_norm(x, random_f64({3}, 1, false), random_f64({4}, 1, false)), Error);
  EXPECT_THROW(ops::layer_norm(x, random_f64({4}, 1, false), Tensor()), Error);
  EXPECT_THROW(ops::layer_norm(x, Tensor::ones({4}), random_f64({4}, 1, false)), Error);  // float32 weight
}

TEST(LayerNorm, CudaMatchesCpu) {
  DDP_SKIP_WITHOUT_GPU();
  // float32 on both sides, each measured from float64. dweight/dbias sum over every row, each side in an
  // order of its own: the GPU's error may be up to twice the CPU's plus rows x 2^-24 (a float32 sum of n
  // unit-sized terms drifts by about n x 2^-24 in the worst order, by the random walk of its rounding
  // errors). The first GPU run (2026-12-04, H200) had the two float32 results 3.2e-5 apart at 8192 rows, and
  // the GPU's error 3x the CPU's (6.4e-5 vs 2.3e-5; the bound there is 4.9e-4). {8, 1024, 768}: GPT-2 small's
  // rows, dweight/dbias in row chunks (kernels/cuda/column_sum_plan.h); {4099, 33} a prime row count; rows
  // of 4096 and 4097 columns: the last that get one warp each (kernels/cuda/layernorm.cu) and the first that
  // get a block.
  for (const Shape& s : std::vector<Shape>{
           {3, 5}, {4, 16, 768}, {2, 1000}, {8, 1024, 768}, {4099, 33}, {3, 4096}, {3, 4097}, {2, 9000}}) {
    SCOPED_TRACE("shape " + shape_str(s));
    const int64_t c = s.back(), rows = shape_numel(s) / c;
    expect_cuda_as_accurate_as_cpu(
        [](const std::vector<Tensor>& in) { return ops::layer_norm(in[0], in[1], in[2]); },
        {random_f64(s, 1), random_f64({c}, 2), random_f64({c}, 3)},
        std::max(1e-6, std::ldexp(static_cast<double>(rows), -24)));
  }
}

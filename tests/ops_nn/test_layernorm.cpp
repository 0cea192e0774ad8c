// test_layernorm.cpp - layer_norm against a plain float64 reference; gradcheck of x, weight and bias;
// float32 vs float64; bad parameter shapes; CUDA parity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "runtime/ops/layernorm.h"
#include "runtime/ops/mixed_precision.h"
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

// layer_norm_bf16_output under bf16 compute: y is a bfloat16 tensor holding layer_norm's float32 y rounded
// once, and given a bfloat16 gradient (what a bf16 GEMM's dx is) dx, dweight and dbias are bitwise
// layer_norm's given that gradient's float32 values - on each device against the same device's float32
// kernels (the bf16 kernels widen and round exactly, the arithmetic is the float32 one). Over one row, empty
// batches, the warp-per-row kernels (<= 4096 columns) and the block-per-row ones beyond, and both chunkings
// of the parameter sums. A float32 gradient is taken too; outside bf16 compute it is layer_norm itself.
TEST(LayerNorm, Bf16OutputIsTheRoundedOutputWithTheSameGradients) {
  std::vector<Device> devices{Device::cpu()};
  if (cuda_device_count() > 0) devices.push_back(Device::cuda(0));
  int cases = 0;
  for (Device dev : devices)
    for (int64_t rows : {0, 1, 7, 600})
      for (int64_t cols : {1, 31, 768, 4097}) {
        SCOPED_TRACE(dev.str() + " rows " + std::to_string(rows) + " cols " + std::to_string(cols));
        auto leaf = [&](const Shape& shape, uint64_t seed, double scale, double shift) {
          Tensor t = (random_f64(shape, seed, false) * scale + shift).to(DType::F32).to(dev);
          t.set_requires_grad(true);
          return t;
        };
        const Tensor dy16 = random_f64({rows, cols}, 31, false).to(DType::F32).to(DType::BF16).to(dev);
        struct Out {
          Tensor y, dx, dw, db;
        };
        auto run = [&](bool bf16_out) {
          Tensor x = leaf({rows, cols}, 11, 3.0, 0.5), w = leaf({cols}, 12, 1.0, 1.0),
                 b = leaf({cols}, 13, 1.0, 0.0);
          ops::Bf16Compute on;
          Out o;
          o.y = bf16_out ? ops::layer_norm_bf16_output(x, w, b) : ops::layer_norm(x, w, b);
          autograd::backward({o.y}, {bf16_out ? dy16 : dy16.to(DType::F32)});
          o.dx = x.grad();
          o.dw = w.grad();
          o.db = b.grad();
          return o;
        };
        const Out a = run(true), r = run(false);
        EXPECT_EQ(a.y.dtype(), DType::BF16);
        EXPECT_EQ(r.y.dtype(), DType::F32);
        EXPECT_EQ(values(a.y), values(r.y.to(DType::BF16)));
        EXPECT_EQ(a.dx.dtype(), DType::F32);
        EXPECT_EQ(values(a.dx), values(r.dx));
        EXPECT_EQ(values(a.dw), values(r.dw));
        EXPECT_EQ(values(a.db), values(r.db));
        ++cases;
      }
  EXPECT_GE(cases, 16);
  // a float32 gradient of the bf16 y; outside bf16 compute, layer_norm
  Tensor x = random_f64({3, 5}, 1).to(DType::F32), w = Tensor::ones({5}), b = Tensor::zeros({5});
  x.set_requires_grad(true);
  {
    ops::Bf16Compute on;
    autograd::backward({ops::layer_norm_bf16_output(x, w, b)}, {Tensor::ones({3, 5})});
  }
  EXPECT_TRUE(x.grad().defined());
  EXPECT_EQ(ops::layer_norm_bf16_output(x, w, b).dtype(), DType::F32);
}

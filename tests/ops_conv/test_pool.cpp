// test_pool.cpp - max_pool2d and avg_pool2d against plain float64 loops written here: forward values, the
// tie rule (first maximum in row-major window order gets the gradient), padding that never wins a max,
// count_include_pad averages, gradcheck, float32 vs float64 and bad-input errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "runtime/autograd/engine.h"
#include "runtime/ops/pool.h"
#include "tests/support/gradcheck.h"

using namespace ddp;
using ddp::testing::all_close;
using ddp::testing::gradcheck;

namespace {

struct PoolCase {
  int64_t n, c, h, w, kernel, stride, padding;  // stride as passed (0 = kernel)
};

const std::vector<PoolCase> kCases = {
    {2, 3, 5, 7, 3, 1, 0}, {2, 3, 5, 7, 3, 1, 1}, {2, 3, 5, 7, 3, 2, 0}, {2, 3, 5, 7, 3, 2, 1},
    {1, 2, 6, 6, 2, 0, 0}, {1, 1, 1, 1, 1, 1, 0}, {2, 1, 4, 5, 2, 1, 1}, {1, 2, 3, 8, 3, 3, 1},
};

std::string describe(const PoolCase& c) {
  return "x (" + std::to_string(c.n) + "," + std::to_string(c.c) + "," + std::to_string(c.h) + "," +
         std::to_string(c.w) + ") kernel " + std::to_string(c.kernel) + " stride " +
         std::to_string(c.stride) + " padding " + std::to_string(c.padding);
}

// The reference pooling of one case: outputs and, for max, the flat input index each gradient goes to.
struct Pooled {
  std::vector<double> y;
  std::vector<int64_t> winner;  // max only: index into x of the first maximum of each window
  int64_t ho, wo;
};

Pooled reference_pool(const PoolCase& c, const std::vector<double>& x, bool max) {
  const int64_t s = c.stride == 0 ? c.kernel : c.stride;
  Pooled r;
  r.ho = (c.h + 2 * c.padding - c.kernel) / s + 1;
  r.wo = (c.w + 2 * c.padding - c.kernel) / s + 1;
  for (int64_t plane = 0; plane < c.n * c.c; ++plane)
    for (int64_t oh = 0; oh < r.ho; ++oh)
      for (int64_t ow = 0; ow < r.wo; ++ow) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t best_at = -1;
        for (int64_t ki = 0; ki < c.kernel; ++ki)
          for (int64_t kj = 0; kj < c.kernel; ++kj) {
            const int64_t ih = oh * s - c.padding + ki, iw = ow * s - c.padding + kj;
            if (ih < 0 || ih >= c.h || iw < 0 || iw >= c.w) continue;  // padding: adds 0, never the max
            const int64_t at = (plane * c.h + ih) * c.w + iw;
            sum += x[at];
            if (best_at < 0 || x[at] > best) {
              best = x[at];
              best_at = at;
            }
          }
        r.y.push_back(max ? best : sum / double(c.kernel * c.kernel));
        r.winner.push_back(best_at);
      }
  return r;
}

// Values drawn from {-2, -1, 0, 1} so that windows have many ties.
Tensor tie_heavy(const Shape& shape, uint64_t seed, DType dtype) {
  Tensor u = Tensor::uniform(shape, seed, -2.0, 2.0, DType::F64);
  std::vector<double> v = u.to_double_vector();
  for (double& e : v) e = std::floor(e);
  return Tensor::from_vector(v, shape, dtype);
}

}  // namespace

TEST(MaxPool2d, ForwardMatchesPlainLoops) {
  uint64_t seed = 1;
  for (const PoolCase& c : kCases) {
    SCOPED_TRACE(describe(c));
    Tensor x = Tensor::randn({c.n, c.c, c.h, c.w}, seed++, DType::F64);
    Pooled ref = reference_pool(c, x.to_double_vector(), true);
    Tensor y = ops::max_pool2d(x, c.kernel, c.stride, c.padding);
    ASSERT_EQ(y.shape(), Shape({c.n, c.c, ref.ho, ref.wo}));
    EXPECT_TRUE(all_close(y, ref.y, 0.0));
    Tensor y32 = ops::max_pool2d(x.to(DType::F32), c.kernel, c.stride, c.padding);
    EXPECT_TRUE(all_close(y32, ref.y, 1e-6, 1e-6));
  }
}

// Every output's gradient goes to the first maximum of its window (summed where windows overlap),
// on inputs full of ties, float32 and float64.
TEST(MaxPool2d, TiesRouteGradientToFirstMaximum) {
  uint64_t seed = 50;
  for (DType dtype : {DType::F64, DType::F32}) {
    for (const PoolCase& c : kCases) {
      SCOPED_TRACE(describe(c));
      Tensor x = tie_heavy({c.n, c.c, c.h, c.w}, seed++, dtype).set_requires_grad(true);
      Pooled ref = reference_pool(c, x.to_double_vector(), true);
      Tensor y = ops::max_pool2d(x, c.kernel, c.stride, c.padding);
      EXPECT_TRUE(all_close(y, ref.y, 0.0));
      Tensor dy = Tensor::randn(y.shape(), seed++, DType::F64);
      autograd::backward({y}, {dy.to(dtype)});
      std::vector<double> expected(x.numel(), 0.0);
      const std::vector<double> dyv = dy.to(dtype).to_double_vector();
      for (size_t i = 0; i < ref.winner.size(); ++i) expected[ref.winner[i]] += dyv[i];
      EXPECT_TRUE(all_close(x.grad(), expected, 1e-6, 1e-6));
    }
  }
}

TEST(MaxPool2d, ConstantInputPicksTopLeftOfEachWindow) {
  Tensor x = Tensor::ones({1, 1, 4, 4}, DType::F64).set_requires_grad(true);
  Tensor y = ops::max_pool2d(x, 2);  // stride 2: windows at (0,0), (0,2), (2,0), (2,2)
  autograd::backward({y}, {Tensor::ones(y.shape(), DType::F64)});
  EXPECT_TRUE(all_close(x.grad(), {1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0}, 0.0));
}

TEST(MaxPool2d, PaddingNeverWinsOverNegativeValues) {
  Tensor x = Tensor::full({1, 2, 3, 3}, -5.0, DType::F64);
  Tensor y = ops::max_pool2d(x, 3, 1, 1);
  for (double v : y.to_double_vector()) EXPECT_EQ(v, -5.0);
}

TEST(MaxPool2d, Gradcheck) {
  uint64_t seed = 100;
  for (const PoolCase& c : kCases) {
    SCOPED_TRACE(describe(c));
    Tensor x = ddp::testing::random_f64({c.n, c.c, c.h, c.w}, seed++);  // continuous values: no ties
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) { return ops::max_pool2d(in[0], c.kernel, c.stride, c.padding); },
        {x}));
  }
}

TEST(AvgPool2d, ForwardMatchesPlainLoopsCountingPadding) {
  uint64_t seed = 200;
  for (const PoolCase& c : kCases) {
    SCOPED_TRACE(describe(c));
    Tensor x = Tensor::randn({c.n, c.c, c.h, c.w}, seed++, DType::F64);
    Pooled ref = reference_pool(c, x.to_double_vector(), false);
    Tensor y = ops::avg_pool2d(x, c.kernel, c.stride, c.padding);
    ASSERT_EQ(y.shape(), Shape({c.n, c.c, ref.ho, ref.wo}));
    EXPECT_TRUE(all_close(y, ref.y, 1e-12, 1e-12));
    Tensor y32 = ops::avg_pool2d(x.to(DType::F32), c.kernel, c.stride, c.padding);
    EXPECT_TRUE(all_close(y32, ref.y, 1e-5, 1e-5));
  }
  // A corner window of a padded 3x3 average over ones covers 4 real cells of 9.
  Tensor corner = ops::avg_pool2d(Tensor::ones({1, 1, 2, 2}, DType::F64), 3, 1, 1);
  EXPECT_TRUE(all_close(corner, {4.0 / 9, 4.0 / 9, 4.0 / 9, 4.0 / 9}, 1e-15));
}

TEST(AvgPool2d, Gradcheck) {
  uint64_t seed = 300;
  for (const PoolCase& c : kCases) {
    SCOPED_TRACE(describe(c));
    Tensor x = ddp::testing::random_f64({c.n, c.c, c.h, c.w}, seed++);
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) { return ops::avg_pool2d(in[0], c.kernel, c.stride, c.padding); },
        {x}));
  }
}

TEST(Pool2d, BadInputsRaiseErrors) {
  Tensor x = Tensor::zeros({1, 1, 4, 4});
  EXPECT_THROW(ops::max_pool2d(x, 0), Error);                      // kernel 0
  EXPECT_THROW(ops::max_pool2d(x, 3, 1, 2), Error);                // padding > kernel/2
  EXPECT_THROW(ops::avg_pool2d(x, 6), Error);                      // kernel larger than input
  EXPECT_THROW(ops::avg_pool2d(x, 2, -1), Error);                  // negative stride
  EXPECT_THROW(ops::max_pool2d(Tensor::zeros({4, 4}), 2), Error);  // not 4-D
  EXPECT_THROW(ops::max_pool2d(Tensor::zeros({1, 1, 4, 4}, DType::I64), 2), Error);  // int dtype
}

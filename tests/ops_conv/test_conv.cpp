// test_conv.cpp - conv2d against a direct 7-loop float64 convolution written here, gradients by finite
// differences (gradcheck), float32 vs float64, bad-input errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/autograd/engine.h"
#include "runtime/ops/conv.h"
#include "tests/support/gradcheck.h"

using namespace ddp;
using ddp::testing::all_close;
using ddp::testing::gradcheck;

namespace {

struct ConvCase {
  int64_t n, cin, h, w, cout, kh, kw, stride, padding;
  bool bias;
};

// A case's shapes and its output size by the textbook formula.
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p) { return (in + 2 * p - k) / s + 1; }

// The definition: y[n,co,oh,ow] = b[co] + sum_{ci,ki,kj} x[n,ci,oh*s-p+ki,ow*s-p+kj] * w[co,ci,ki,kj].
std::vector<double> reference_conv(const ConvCase& c, const std::vector<double>& x,
                                   const std::vector<double>& w, const std::vector<double>& b) {
  const int64_t ho = out_size(c.h, c.kh, c.stride, c.padding), wo = out_size(c.w, c.kw, c.stride, c.padding);
  std::vector<double> y(c.n * c.cout * ho * wo, 0.0);
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t co = 0; co < c.cout; ++co)
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow) {
          double acc = c.bias ? b[co] : 0.0;
          for (int64_t ci = 0; ci < c.cin; ++ci)
            for (int64_t ki = 0; ki < c.kh; ++ki)
              for (int64_t kj = 0; kj < c.kw; ++kj) {
                const int64_t ih = oh * c.stride - c.padding + ki, iw = ow * c.stride - c.padding + kj;
                if (ih < 0 || ih >= c.h || iw < 0 || iw >= c.w) continue;
                acc += x[((n * c.cin + ci) * c.h + ih) * c.w + iw] *
                       w[((co * c.cin + ci) * c.kh + ki) * c.kw + kj];
              }
          y[((n * c.cout + co) * ho + oh) * wo + ow] = acc;
        }
  return y;
}

const std::vector<ConvCase> kCases = {
    {2, 3, 5, 7, 4, 3, 3, 1, 0, true}, {2, 3, 5, 7, 4, 3, 3, 1, 1, true},  {2, 3, 5, 7, 4, 3, 3, 2, 0, false},
    {2, 3, 5, 7, 4, 3, 3, 2, 1, true}, {1, 1, 1, 1, 1, 1, 1, 1, 0, true},  {3, 2, 4, 5, 3, 1, 1, 1, 0, true},
    {1, 2, 6, 5, 2, 2, 3, 2, 1, true}, {2, 1, 3, 3, 2, 5, 5, 1, 2, false}, {1, 3, 7, 4, 1, 3, 2, 3, 1, true},
    {2, 2, 4, 4, 3, 1, 1, 2, 1, true},
};

std::string describe(const ConvCase& c) {
  return "x (" + std::to_string(c.n) + "," + std::to_string(c.cin) + "," + std::to_string(c.h) + "," +
         std::to_string(c.w) + ") w (" + std::to_string(c.cout) + "," + std::to_string(c.cin) + "," +
         std::to_string(c.kh) + "," + std::to_string(c.kw) + ") stride " + std::to_string(c.stride) +
         " padding " + std::to_string(c.padding) + (c.bias ? " bias" : " no bias");
}

}  // namespace

TEST(Conv2d, ForwardMatchesDirectLoopsFloat64) {
  uint64_t seed = 1;
  for (const ConvCase& c : kCases) {
    SCOPED_TRACE(describe(c));
    Tensor x = Tensor::randn({c.n, c.cin, c.h, c.w}, seed++, DType::F64);
    Tensor w = Tensor::randn({c.cout, c.cin, c.kh, c.kw}, seed++, DType::F64);
    Tensor b = c.bias ? Tensor::randn({c.cout}, seed++, DType::F64) : Tensor();
    Tensor y = ops::conv2d(x, w, b, c.stride, c.padding);
    const int64_t ho = out_size(c.h, c.kh, c.stride, c.padding),
                  wo = out_size(c.w, c.kw, c.stride, c.padding);
    ASSERT_EQ(y.shape(), Shape({c.n, c.cout, ho, wo}));
    const std::vector<double> ref = reference_conv(c, x.to_double_vector(), w.to_double_vector(),
                                                   c.bias ? b.to_double_vector() : std::vector<double>{});
    EXPECT_TRUE(all_close(y, ref, 1e-12, 1e-12));
  }
}

// float32 (OpenBLAS sgemm) against the float64 reference: relative error of a K-term dot product.
TEST(Conv2d, Float32MatchesFloat64Reference) {
  uint64_t seed = 100;
  for (const ConvCase& c : kCases) {
    SCOPED_TRACE(describe(c));
    Tensor x = Tensor::randn({c.n, c.cin, c.h, c.w}, seed++, DType::F64);
    Tensor w = Tensor::randn({c.cout, c.cin, c.kh, c.kw}, seed++, DType::F64);
    Tensor b = c.bias ? Tensor::randn({c.cout}, seed++, DType::F64) : Tensor();
    Tensor y32 = ops::conv2d(x.to(DType::F32), w.to(DType::F32), c.bias ? b.to(DType::F32) : Tensor(),
                             c.stride, c.padding);
    EXPECT_EQ(y32.dtype(), DType::F32);
    const std::vector<double> ref = reference_conv(c, x.to_double_vector(), w.to_double_vector(),
                                                   c.bias ? b.to_double_vector() : std::vector<double>{});
    EXPECT_TRUE(all_close(y32, ref, 1e-5, 1e-5));
  }
}

TEST(Conv2d, GradcheckInputWeightBias) {
  uint64_t seed = 200;
  for (const ConvCase& c : kCases) {
    SCOPED_TRACE(describe(c));
    Tensor x = ddp::testing::random_f64({c.n, c.cin, c.h, c.w}, seed++);
    Tensor w = ddp::testing::random_f64({c.cout, c.cin, c.kh, c.kw}, seed++);
    Tensor b = c.bias ? ddp::testing::random_f64({c.cout}, seed++) : Tensor();
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], in[2], c.stride, c.padding); },
        {x, w, b}));
  }
}

// Only the weight requires grad: x gets no gradient, the weight's matches the float64 formula
// dw[co,ci,ki,kj] = sum_{n,oh,ow} dy[n,co,oh,ow] * x[n,ci,oh*s-p+ki,ow*s-p+kj] with dy = 1.
TEST(Conv2d, WeightOnlyGradientMatchesFormula) {
  const ConvCase c{2, 3, 5, 7, 2, 3, 3, 2, 1, false};
  Tensor x = Tensor::randn({c.n, c.cin, c.h, c.w}, 7, DType::F64);
  Tensor w = ddp::testing::random_f64({c.cout, c.cin, c.kh, c.kw}, 8);
  Tensor y = ops::conv2d(x, w, Tensor(), c.stride, c.padding);
  autograd::backward({y}, {Tensor::ones(y.shape(), DType::F64)});
  EXPECT_FALSE(x.grad().defined());
  ASSERT_TRUE(w.grad().defined());
  const std::vector<double> xv = x.to_double_vector();
  const int64_t ho = y.size(2), wo = y.size(3);
  std::vector<double> expected(w.numel(), 0.0);
  for (int64_t co = 0; co < c.cout; ++co)
    for (int64_t ci = 0; ci < c.cin; ++ci)
      for (int64_t ki = 0; ki < c.kh; ++ki)
        for (int64_t kj = 0; kj < c.kw; ++kj) {
          double acc = 0;
          for (int64_t n = 0; n < c.n; ++n)
            for (int64_t oh = 0; oh < ho; ++oh)
              for (int64_t ow = 0; ow < wo; ++ow) {
                const int64_t ih = oh * c.stride - c.padding + ki, iw = ow * c.stride - c.padding + kj;
                if (ih >= 0 && ih < c.h && iw >= 0 && iw < c.w)
                  acc += xv[((n * c.cin + ci) * c.h + ih) * c.w + iw];
              }
          expected[((co * c.cin + ci) * c.kh + ki) * c.kw + kj] = acc;
        }
  EXPECT_TRUE(all_close(w.grad(), expected, 1e-12, 1e-12));
}

TEST(Conv2d, Float32BackwardMatchesFloat64) {
  const ConvCase c{2, 3, 5, 7, 4, 3, 3, 1, 1, true};
  Tensor x64 = ddp::testing::random_f64({c.n, c.cin, c.h, c.w}, 11);
  Tensor w64 = ddp::testing::random_f64({c.cout, c.cin, c.kh, c.kw}, 12);
  Tensor b64 = ddp::testing::random_f64({c.cout}, 13);
  Tensor x32 = x64.detach().to(DType::F32).set_requires_grad(true);
  Tensor w32 = w64.detach().to(DType::F32).set_requires_grad(true);
  Tensor b32 = b64.detach().to(DType::F32).set_requires_grad(true);
  Tensor y64 = ops::conv2d(x64, w64, b64, c.stride, c.padding);
  Tensor y32 = ops::conv2d(x32, w32, b32, c.stride, c.padding);
  Tensor seed = Tensor::randn(y64.shape(), 14, DType::F64);
  autograd::backward({y64}, {seed});
  autograd::backward({y32}, {seed.to(DType::F32)});
  EXPECT_TRUE(all_close(x32.grad(), x64.grad(), 1e-4, 1e-4));
  EXPECT_TRUE(all_close(w32.grad(), w64.grad(), 1e-4, 1e-4));
  EXPECT_TRUE(all_close(b32.grad(), b64.grad(), 1e-4, 1e-4));
}

TEST(Conv2d, BadInputsRaiseErrors) {
  Tensor x = Tensor::zeros({1, 3, 5, 5}, DType::F32);
  EXPECT_THROW(ops::conv2d(x, Tensor::zeros({2, 4, 3, 3}, DType::F32)), Error);          // channels differ
  EXPECT_THROW(ops::conv2d(x, Tensor::zeros({2, 3, 7, 7}, DType::F32)), Error);          // kernel too big
  EXPECT_THROW(ops::conv2d(x, Tensor::zeros({2, 3, 3, 3}, DType::F64)), Error);          // dtypes differ
  EXPECT_THROW(ops::conv2d(x, Tensor::zeros({2, 3, 3}, DType::F32)), Error);             // weight not 4-D
  EXPECT_THROW(ops::conv2d(x, Tensor::zeros({2, 3, 3, 3}), Tensor::zeros({3})), Error);  // bias size
  EXPECT_THROW(ops::conv2d(x, Tensor::zeros({2, 3, 3, 3}), Tensor(), 0), Error);         // stride 0
  EXPECT_THROW(ops::conv2d(x, Tensor::zeros({2, 3, 3, 3}), Tensor(), 1, -1), Error);     // negative padding
  EXPECT_THROW(ops::conv2d(x.to(DType::I32), Tensor::zeros({2, 3, 3, 3}, DType::I32)), Error);  // int dtype
  try {
    ops::conv2d(x, Tensor::zeros({2, 4, 3, 3}, DType::F32));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input channels"), std::string::npos) << e.what();
  }
}

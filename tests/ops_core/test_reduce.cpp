// test_reduce.cpp - sum and mean over all elements and over chosen dimensions (keepdim,
// negative dims, several non-adjacent dims, size-1 dims): forward against plain loops, accuracy
// of long float32 sums, gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "runtime/ops/reduce.h"
#include "tests/support/gradcheck.h"

using namespace ddp;
using ddp::testing::all_close;
using ddp::testing::gradcheck;
using ddp::testing::random_f64;

namespace {
// Reference: sum of x over dims (already non-negative), as a flat vector in kept-dimension order.
std::vector<double> reference_sum(const Tensor& x, const std::vector<int64_t>& dims, double scale) {
  const Shape& s = x.shape();
  const size_t nd = s.size();
  std::vector<bool> red(nd, dims.empty());
  for (int64_t d : dims) red[d] = true;
  Shape kept_strides(nd, 0);
  int64_t out_n = 1;
  for (size_t d = nd; d-- > 0;) {
    if (!red[d]) {
      kept_strides[d] = out_n;
      out_n *= s[d];
    }
  }
  std::vector<double> out(static_cast<size_t>(out_n), 0.0), v = x.to_double_vector();
  std::vector<int64_t> idx(nd, 0);
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t rest = static_cast<int64_t>(i), o = 0;
    for (size_t d = nd; d-- > 0;) {
      o += (rest % s[d]) * kept_strides[d];
      rest /= s[d];
    }
    out[o] += v[i];
  }
  for (double& e : out) e *= scale;
  return out;
}

struct ReduceCase {
  Shape shape;
  std::vector<int64_t> dims;      // as passed (may be negative)
  std::vector<int64_t> dims_pos;  // normalised, for the reference
};
std::vector<ReduceCase> cases() {
  return {{{4, 5}, {1}, {1}},
          {{4, 5}, {0}, {0}},
          {{4, 5}, {-1}, {1}},
          {{2, 3, 4}, {0, 2}, {0, 2}},
          {{2, 3, 4}, {1}, {1}},
          {{2, 3, 4}, {-3, -2}, {0, 1}},
          {{3, 1, 4}, {1}, {1}},
          {{3, 1, 4}, {0, 1}, {0, 1}},
          {{1, 1}, {0}, {0}},
          {{2, 3, 1, 5}, {}, {}},
          {{5, 2, 3, 2}, {0, 2}, {0, 2}},
          {{7}, {0}, {0}}};
}
Shape expected_shape(const Shape& s, const std::vector<int64_t>& dims_pos, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < s.size(); ++d) {
    const bool red = dims_pos.empty() || std::find(dims_pos.begin(), dims_pos.end(), d) != dims_pos.end();
    if (!red)
      out.push_back(s[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}
}  // namespace

TEST(Reduce, SumAndMeanOverDimsMatchLoops) {
  uint64_t seed = 1;
  for (const auto& c : cases()) {
    Tensor x = random_f64(c.shape, seed++, false);
    int64_t count = 1;
    for (size_t d = 0; d < c.shape.size(); ++d)
      if (c.dims_pos.empty() || std::find(c.dims_pos.begin(), c.dims_pos.end(), d) != c.dims_pos.end())
        count *= c.shape[d];
    for (bool keepdim : {false, true}) {
      Tensor s = ops::sum(x, c.dims, keepdim), m = ops::mean(x, c.dims, keepdim);
      EXPECT_EQ(s.shape(), expected_shape(c.shape, c.dims_pos, keepdim)) << shape_str(c.shape);
      EXPECT_EQ(m.shape(), s.shape());
      EXPECT_TRUE(all_close(s, reference_sum(x, c.dims_pos, 1.0), 1e-12, 1e-12)) << shape_str(c.shape);
      EXPECT_TRUE(all_close(m, reference_sum(x, c.dims_pos, 1.0 / count), 1e-12, 1e-12))
          << shape_str(c.shape);
    }
  }
}

TEST(Reduce, SumAllAndMeanAll) {
  Tensor x = random_f64({3, 7, 2}, 5, false);
  EXPECT_EQ(ops::sum(x).shape(), Shape{});
  EXPECT_NEAR(ops::sum(x).item(), reference_sum(x, {}, 1.0)[0], 1e-12);
  EXPECT_NEAR(ops::mean(x).item(), reference_sum(x, {}, 1.0 / 42)[0], 1e-12);
  EXPECT_NEAR(ops::sum(Tensor::zeros({0, 3}, DType::F64)).item(), 0.0, 0.0);
  EXPECT_TRUE(std::isnan(ops::mean(Tensor::zeros({0})).item()));  // the mean of nothing, as PyTorch
}

TEST(Reduce, LongFloat32SumsAreAccurate) {
  // 1e6 copies of 0.1f: a plain float accumulator drifts by ~1%; short float blocks summed in double stay
  // within ~16 float epsilons (1e-6) of the exact sum at any length.
  const int64_t n = 1000000;
  Tensor x = Tensor::full({n}, 0.1, DType::F32);
  const double exact = static_cast<double>(0.1f) * n;
  EXPECT_NEAR(ops::sum(x).item(), exact, exact * 1e-6);
  Tensor x2 = Tensor::full({1000, 1000}, 0.1, DType::F32);
  EXPECT_TRUE(
      all_close(ops::sum(x2, {0}), std::vector<double>(1000, static_cast<double>(0.1f) * 1000), 0, 1e-6));
  EXPECT_TRUE(all_close(ops::mean(x2, {1}), std::vector<double>(1000, static_cast<double>(0.1f)), 0, 1e-6));
}

TEST(Reduce, Float32MatchesFloat64) {
  for (const auto& c : cases()) {
    Tensor x = random_f64(c.shape, 3, false);
    EXPECT_TRUE(all_close(ops::sum(x.to(DType::F32), c.dims, true), ops::sum(x, c.dims, true), 1e-6, 1e-6));
  }
}

TEST(Reduce, Gradients) {
  uint64_t seed = 50;
  for (const auto& c : cases()) {
    for (bool keepdim : {false, true}) {
      Tensor x = random_f64(c.shape, seed++);
      auto dims = c.dims;
      EXPECT_TRUE(gradcheck(
          [dims, keepdim](const std::vector<Tensor>& in) { return ops::sum(in[0], dims, keepdim); }, {x}))
          << "sum " << shape_str(c.shape);
      EXPECT_TRUE(gradcheck(
          [dims, keepdim](const std::vector<Tensor>& in) { return ops::mean(in[0], dims, keepdim); }, {x}))
          << "mean " << shape_str(c.shape);
    }
  }
  Tensor x = random_f64({2, 3}, 9);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::mean(in[0]); }, {x}));
}

TEST(Reduce, BadDimsNameTheProblem) {
  Tensor x = Tensor::zeros({2, 3});
  try {
    ops::sum(x, {2});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::sum(x, {-3}), Error);
  EXPECT_THROW(ops::mean(x, {1, -1}), Error);  // the same dimension twice
}

// test_shape.cpp - reshape/flatten/unsqueeze/squeeze (views), transpose/permute (copies; round trips),
// concat, split (with unused outputs), slice: values against index arithmetic done here, gradients, errors.
#include <gtest/gtest.h>

#include <numeric>

#include "runtime/autograd/engine.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/shape.h"
#include "tests/support/gradcheck.h"

using namespace ddp;
using ddp::testing::all_close;
using ddp::testing::gradcheck;
using ddp::testing::random_f64;

namespace {
// Row-major flat index of idx in shape s.
int64_t flat(const Shape& s, const std::vector<int64_t>& idx) {
  int64_t f = 0;
  for (size_t d = 0; d < s.size(); ++d) f = f * s[d] + idx[d];
  return f;
}
// Multi-index of flat index i in shape s.
std::vector<int64_t> unflat(const Shape& s, int64_t i) {
  std::vector<int64_t> idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = i % s[d];
    i /= s[d];
  }
  return idx;
}
// The reference permute: out[idx] = x[idx mapped back through perm].
std::vector<double> reference_permute(const Tensor& x, const std::vector<int64_t>& perm) {
  const Shape& s = x.shape();
  Shape os(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) os[i] = s[perm[i]];
  std::vector<double> v = x.to_double_vector(), out(v.size());
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    std::vector<int64_t> oi = unflat(os, i), ii(s.size());
    for (size_t k = 0; k < perm.size(); ++k) ii[perm[k]] = oi[k];
    out[i] = v[flat(s, ii)];
  }
  return out;
}
}  // namespace

TEST(Shape, ReshapeIsAViewAndInfersMinusOne) {
  Tensor x = random_f64({2, 3, 4}, 1, false);
  Tensor y = ops::reshape(x, {4, -1});
  EXPECT_EQ(y.shape(), (Shape{4, 6}));
  EXPECT_EQ(y.raw_data(), x.raw_data());  // no copy
  EXPECT_EQ(ops::flatten(x, 1).shape(), (Shape{2, 12}));
  EXPECT_EQ(ops::flatten(x).shape(), (Shape{24}));
  EXPECT_EQ(ops::flatten(x, 0, 1).shape(), (Shape{6, 4}));
  EXPECT_EQ(ops::unsqueeze(x, 0).shape(), (Shape{1, 2, 3, 4}));
  EXPECT_EQ(ops::unsqueeze(x, -1).shape(), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(ops::squeeze(ops::unsqueeze(x, 2), 2).shape(), x.shape());
  EXPECT_THROW(ops::reshape(x, {5, -1}), Error);
  EXPECT_THROW(ops::squeeze(x, 1), Error);  // size 3, not 1
  EXPECT_THROW(ops::flatten(x, 2, 1), Error);
}

TEST(Shape, ViewGradients) {
  Tensor x = random_f64({2, 3, 1}, 2);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::reshape(in[0], {3, -1}); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::flatten(in[0], 1); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::unsqueeze(in[0], 1); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::squeeze(in[0], -1); }, {x}));
}

TEST(Shape, PermuteMatchesIndexArithmetic) {
  struct Case {
    Shape s;
    std::vector<int64_t> perm;
  };
  const std::vector<Case> cases = {
      {{3, 5}, {1, 0}},       {{2, 3, 4}, {2, 0, 1}},       {{2, 3, 4}, {0, 2, 1}},
      {{2, 3, 4}, {1, 0, 2}}, {{1, 4, 1, 3}, {3, 2, 1, 0}}, {{2, 3, 4, 5}, {0, 2, 1, 3}},
      {{37, 41}, {1, 0}},     {{2, 33, 35}, {0, 2, 1}},     {{5}, {0}},
      {{2, 1, 3}, {1, 0, 2}}};
  uint64_t seed = 1;
  for (const auto& c : cases) {
    for (DType dt : {DType::F64, DType::F32}) {
      Tensor x = random_f64(c.s, seed++, false).to(dt);
      Tensor y = ops::permute(x, c.perm);
      EXPECT_TRUE(all_close(y, reference_permute(x, c.perm), 0)) << shape_str(c.s);
    }
  }
  // Integer tensors move too (shape ops are dtype-agnostic).
  Tensor idx = ops::reshape(Tensor::arange(6), {2, 3});
  EXPECT_TRUE(all_close(ops::transpose(idx, 0, 1), {0, 3, 1, 4, 2, 5}, 0));
}

TEST(Shape, TransposeAndPermuteRoundTrip) {
  Tensor x = random_f64({3, 1, 4, 5}, 7, false);
  Tensor t = ops::transpose(ops::transpose(x, 1, 3), 3, 1);
  EXPECT_TRUE(all_close(t, x, 0));
  const std::vector<int64_t> perm = {2, 0, 3, 1};
  std::vector<int64_t> inv(4);
  for (int i = 0; i < 4; ++i) inv[perm[i]] = i;
  EXPECT_TRUE(all_close(ops::permute(ops::permute(x, perm), inv), x, 0));
  EXPECT_EQ(ops::transpose(x, -1, 0).shape(), (Shape{5, 1, 4, 3}));
  EXPECT_THROW(ops::permute(x, {0, 1, 2}), Error);
  EXPECT_THROW(ops::permute(x, {0, 1, 1, 2}), Error);
}

TEST(Shape, PermuteGradients) {
  Tensor x = random_f64({2, 3, 4}, 3);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::permute(in[0], {2, 0, 1}); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::transpose(in[0], 0, 2); }, {x}));
  Tensor y = random_f64({1, 5}, 4);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::transpose(in[0], 0, 1); }, {y}));
}

TEST(Shape, ConcatMatchesIndexArithmetic) {
  for (int64_t dim : {0, 1, 2, -1}) {
    Shape sa = {2, 3, 4}, sb = {2, 3, 4};
    const int64_t d = dim < 0 ? dim + 3 : dim;
    sb[d] = 1;
    Tensor a = random_f64(sa, 1, false), b = random_f64(sb, 2, false), c = random_f64(sa, 3, false);
    Tensor y = ops::concat({a, b, c}, dim);
    Shape so = sa;
    so[d] = 2 * sa[d] + 1;
    ASSERT_EQ(y.shape(), so);
    std::vector<double> av = a.to_double_vector(), bv = b.to_double_vector(), cv = c.to_double_vector(),
                        expect;
    for (int64_t i = 0; i < y.numel(); ++i) {
      std::vector<int64_t> idx = unflat(so, i);
      int64_t k = idx[d];
      if (k < sa[d]) {
        expect.push_back(av[flat(sa, idx)]);
      } else if (k < sa[d] + 1) {
        idx[d] = k - sa[d];
        expect.push_back(bv[flat(sb, idx)]);
      } else {
        idx[d] = k - sa[d] - 1;
        expect.push_back(cv[flat(sa, idx)]);
      }
    }
    EXPECT_TRUE(all_close(y, expect, 0)) << "dim " << dim;
  }
  EXPECT_THROW(ops::concat({Tensor::zeros({2, 3}), Tensor::zeros({3, 3})}, 1), Error);
  EXPECT_THROW(ops::concat({}, 0), Error);
}

TEST(Shape, ConcatGradients) {
  Tensor a = random_f64({2, 3}, 1), b = random_f64({2, 1}, 2), c = random_f64({2, 2}, 3, false);
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::concat({in[0], in[1], in[2]}, 1);
      },
      {a, b, c}));
  Tensor d = random_f64({1, 3}, 4);
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::concat({in[0], in[1]}, 0);
      },
      {d, random_f64({2, 3}, 5)}));
}

TEST(Shape, SplitAndSliceMatchConcatInverse) {
  for (int64_t dim : {0, 1, 2}) {
    Tensor x = random_f64({4, 5, 6}, 9, false);
    const int64_t n = x.shape()[dim];
    std::vector<Tensor> parts = ops::split(x, {1, n - 3, 2}, dim);
    ASSERT_EQ(parts.size(), 3u);
    EXPECT_EQ(parts[1].size(dim), n - 3);
    EXPECT_TRUE(all_close(ops::concat(parts, dim), x, 0)) << "dim " << dim;
    // slice [1, n-2) equals the middle piece
    EXPECT_TRUE(all_close(ops::slice(x, dim, 1, n - 2), parts[1], 0)) << "dim " << dim;
    EXPECT_TRUE(all_close(ops::slice(x, dim, -2, n), parts[2], 0)) << "dim " << dim;
  }
  Tensor x = random_f64({4, 5}, 1, false);
  EXPECT_EQ(ops::slice(x, 0, 1, 3).raw_data(),
            static_cast<char*>(x.raw_data()) + 5 * sizeof(double));  // a view
  EXPECT_EQ(ops::split(x, {2, 2}, 0).size(), 2u);
  EXPECT_THROW(ops::split(x, {2, 2}, 1), Error);  // 4 of the 5 columns
  EXPECT_THROW(ops::slice(x, 1, 3, 2), Error);
  EXPECT_THROW(ops::slice(x, 1, 0, 6), Error);
}

TEST(Shape, SplitGradientsWithUnusedOutputs) {
  Tensor x = random_f64({3, 7}, 4);
  // Only pieces 0 and 2 take part: the gradient of piece 1's columns must be zero.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        std::vector<Tensor> p = ops::split(in[0], {2, 3, 2}, 1);
        return ops::concat({p[0], p[2]}, 1);
      },
      {x}));
  x.set_grad(Tensor());
  std::vector<Tensor> p = ops::split(x, {2, 3, 2}, 1);
  autograd::backward(ops::sum(p[1]));  // only the middle piece used
  std::vector<double> g = x.grad().to_double_vector();
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 7; ++c) EXPECT_EQ(g[r * 7 + c], (c >= 2 && c < 5) ? 1.0 : 0.0) << r << "," << c;
  // dim-0 split (views) and a 1-piece split
  Tensor y = random_f64({4, 2}, 5);
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        std::vector<Tensor> q = ops::split(in[0], {1, 3}, 0);
        return ops::mul(q[1], q[1]);
      },
      {y}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::split(in[0], {2}, 1)[0]; }, {y}));
}

TEST(Shape, SliceGradients) {
  Tensor x = random_f64({3, 5, 2}, 6);
  for (int64_t dim : {0, 1, 2}) {
    EXPECT_TRUE(gradcheck([dim](const std::vector<Tensor>& in) { return ops::slice(in[0], dim, 1, 2); }, {x}))
        << "dim " << dim;
  }
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::slice(in[0], 1, 0, 5); }, {x}));
}

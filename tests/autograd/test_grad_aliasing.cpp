// test_grad_aliasing.cpp - AccumulateGrad must never make two parameters' .grad share memory: an incoming
// gradient is taken over only when nothing else can see its storage (issue 10, defect 1).
#include <gtest/gtest.h>

#include "runtime/autograd/engine.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/shape.h"
#include "tests/support/gradcheck.h"

using namespace ddp;
using ddp::testing::all_close;

TEST(GradAliasing, TwoReshapedParametersOfOneAddGetSeparateGradients) {
  Tensor p1 = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::F64).set_requires_grad(true);
  Tensor p2 = Tensor::from_vector({6, 5, 4, 3, 2, 1}, {3, 2}, DType::F64).set_requires_grad(true);
  Tensor w = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {6}, DType::F64);
  auto loss = [&] { return ops::sum((ops::reshape(p1, {6}) + ops::reshape(p2, {6})) * w); };
  // The add's backward hands the same gradient storage to both reshape backwards.
  autograd::backward(loss());
  EXPECT_NE(p1.grad().storage(), p2.grad().storage()) << "p1.grad and p2.grad alias";
  autograd::backward(loss());  // accumulates: 2w each, not 3w through the alias
  EXPECT_TRUE(all_close(p1.grad(), {2, 4, 6, 8, 10, 12}, 1e-12)) << p1.grad().str();
  EXPECT_TRUE(all_close(p2.grad(), {2, 4, 6, 8, 10, 12}, 1e-12)) << p2.grad().str();
}

TEST(GradAliasing, GradientIsNotAViewOfATensorTheCallerStillHolds) {
  // The seed of backward is the caller's tensor; the parameter's gradient must not be it.
  Tensor p = Tensor::from_vector({1, 2}, {2}, DType::F64).set_requires_grad(true);
  Tensor seed = Tensor::from_vector({1, 1}, {2}, DType::F64);
  Tensor y = ops::reshape(p, {1, 2});
  autograd::backward({y}, {ops::reshape(seed, {1, 2}).detach()});
  ASSERT_TRUE(p.grad().defined());
  EXPECT_NE(p.grad().storage(), seed.storage());
  seed.fill_(7);
  EXPECT_TRUE(all_close(p.grad(), {1, 1}, 1e-12));
}

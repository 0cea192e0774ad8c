// test_gradient_destination.cpp - linear's backward writes a weight's or bias's gradient straight into the
// leaf's grad_destination (the DDP bucket slot) exactly when that is the leaf's whole gradient: the leaf has
// no .grad yet and this edge is its only use in the backward. Anything else allocates as before; values are
// bitwise those of the ordinary path.
#include <gtest/gtest.h>

#include "runtime/autograd/engine.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/reduce.h"

using namespace ddp;

namespace {
struct Leaves {
  Tensor w, b, x, x2;
  Leaves() {
    w = Tensor::randn({3, 4}, 11, DType::F64).set_requires_grad(true);
    b = Tensor::randn({3}, 12, DType::F64).set_requires_grad(true);
    x = Tensor::randn({5, 4}, 13, DType::F64);
    x2 = Tensor::randn({5, 4}, 14, DType::F64);  // a second use sees other inputs: other gradients
  }
};
// Destinations that point at `w_dest` / `b_dest` (as the reducer's slot views do).
void offer(Tensor& leaf, const Tensor& dest) {
  leaf.impl()->grad_destination = {&leaf, [d = dest] { return d.impl_ptr(); }};
}
std::vector<double> reference_grad(bool weight, bool used_twice) {
  Leaves l;
  Tensor y = ops::linear(l.x, l.w, l.b);
  if (used_twice) y = y + ops::linear(l.x2, l.w, l.b);
  autograd::backward(ops::sum(y * y));
  return (weight ? l.w : l.b).grad().to_double_vector();
}
}  // namespace

TEST(GradientDestination, LinearWritesWeightAndBiasGradientsIntoTheOfferedMemory) {
  Leaves l;
  Tensor w_dest = Tensor::zeros({3, 4}, DType::F64), b_dest = Tensor::zeros({3}, DType::F64);
  offer(l.w, w_dest);
  offer(l.b, b_dest);
  autograd::backward(ops::sum(ops::linear(l.x, l.w, l.b) * ops::linear(l.x, l.w, l.b).detach()));
  // (the detached copy keeps each leaf to one use)
  ASSERT_TRUE(l.w.grad().defined());
  EXPECT_EQ(l.w.grad().storage(), w_dest.storage()) << "the weight gradient was not written into the offer";
  EXPECT_EQ(l.b.grad().storage(), b_dest.storage()) << "the bias gradient was not written into the offer";
  // Same values as without an offer: d/dW sum(y * c) with c = y.
  Leaves r;
  autograd::backward(ops::sum(ops::linear(r.x, r.w, r.b) * ops::linear(r.x, r.w, r.b).detach()));
  EXPECT_EQ(w_dest.to_double_vector(), r.w.grad().to_double_vector());
  EXPECT_EQ(b_dest.to_double_vector(), r.b.grad().to_double_vector());
}

TEST(GradientDestination, ALeafUsedTwiceGetsTheSumNotTheLastWrite) {
  Leaves l;
  Tensor w_dest = Tensor::zeros({3, 4}, DType::F64);
  offer(l.w, w_dest);
  Tensor y = ops::linear(l.x, l.w, l.b) + ops::linear(l.x2, l.w, l.b);
  autograd::backward(ops::sum(y * y));
  EXPECT_NE(l.w.grad().storage(), w_dest.storage()) << "two uses, yet one wrote into the offer";
  EXPECT_EQ(l.w.grad().to_double_vector(), reference_grad(true, true));
}

TEST(GradientDestination, AnExistingGradAccumulatesAsBefore) {
  Leaves l;
  Tensor w_dest = Tensor::zeros({3, 4}, DType::F64);
  auto loss = [&] {
    Tensor y = ops::linear(l.x, l.w, l.b);
    return ops::sum(y * y);
  };
  autograd::backward(loss());  // no offer yet: .grad allocated
  offer(l.w, w_dest);
  autograd::backward(loss());  // .grad exists: added to, the offer untouched
  EXPECT_NE(l.w.grad().storage(), w_dest.storage());
  std::vector<double> twice = reference_grad(true, false);
  for (double& v : twice) v *= 2;
  EXPECT_EQ(l.w.grad().to_double_vector(), twice);
  EXPECT_EQ(w_dest.to_double_vector(), std::vector<double>(12, 0.0));
}

TEST(GradientDestination, AnOfferOfAnotherShapeOrDtypeIsIgnored) {
  for (Tensor bad : {Tensor::zeros({5}, DType::F64), Tensor::zeros({3, 4}, DType::F32)}) {
    Leaves l;
    offer(l.w, bad);
    Tensor y = ops::linear(l.x, l.w, l.b);
    autograd::backward(ops::sum(y * y));
    EXPECT_NE(l.w.grad().storage(), bad.storage());
    EXPECT_EQ(l.w.grad().to_double_vector(), reference_grad(true, false));
  }
}

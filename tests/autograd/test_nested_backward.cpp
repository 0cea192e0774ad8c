// test_nested_backward.cpp - a backward that runs inside another (activation checkpointing) keeps its own
// bookkeeping: a weight used inside a checkpointed block and before and/or after it (so its gradient
// accumulator belongs to the outer and the inner backward at once), blocks nested two deep, float32 and
// float64, with and without gradient destinations, two backwards in a row on the thread: every gradient
// equals the uncheckpointed graph's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"
#include "tests/support/checkpoint_block.h"

using namespace ddp;
using namespace ddp::testing;

namespace {
using Grads = std::vector<std::vector<double>>;  // w, v, b, x0, x1

// Two backwards (different inputs) accumulating into the same .grad: the second runs after a nested one.
// With `destinations` each parameter offers memory of its own as gradient destination (as the DDP reducer
// offers bucket slots): two backwards of the nest must never be handed the same memory at once.
Grads run(Placement p, bool ckpt, DType dtype, bool destinations = false) {
  nn::manual_seed(21);
  SharedWeightNet net(p, ckpt, dtype);
  if (destinations)
    for (Tensor* t : {&net.w, &net.v, &net.b})
      t->impl()->grad_destination = {t, [d = Tensor::zeros_like(*t)] { return d.impl_ptr(); }};
  Tensor x0 = Tensor::randn({4, 5}, 31, dtype).set_requires_grad(true);
  Tensor x1 = Tensor::randn({4, 5}, 32, dtype).set_requires_grad(true);
  for (const Tensor& x : {x0, x1}) {
    Tensor out = net.forward(x);
    autograd::backward(ops::sum(out * out));
    EXPECT_FALSE(autograd::in_backward());
  }
  Grads g;
  for (const Tensor& t : {net.w, net.v, net.b, x0, x1}) {
    EXPECT_TRUE(t.grad().defined());
    g.push_back(t.grad().defined() ? t.grad().to_double_vector() : std::vector<double>{});
  }
  return g;
}

double max_rel(const Grads& a, const Grads& b) {
  double worst = 0;
  EXPECT_EQ(a.size(), b.size());
  for (size_t t = 0; t < a.size() && t < b.size(); ++t) {
    EXPECT_EQ(a[t].size(), b[t].size()) << "tensor " << t;
    for (size_t i = 0; i < a[t].size() && i < b[t].size(); ++i)
      worst = std::max(worst, std::abs(a[t][i] - b[t][i]) / std::max(std::abs(b[t][i]), 1e-3));
  }
  return worst;
}
}  // namespace

TEST(NestedBackward, AWeightUsedInsideAndOutsideACheckpointedBlockGetsTheUncheckpointedGradient) {
  for (const Placement& p : all_placements()) {
    SCOPED_TRACE(p.name());
    const Grads reference = run(p, false, DType::F64);
    EXPECT_LT(max_rel(run(p, true, DType::F64), reference), 1e-12);
    EXPECT_LT(max_rel(run(p, true, DType::F32), reference), 1e-4);
    EXPECT_LT(max_rel(run(p, false, DType::F64, true), reference), 1e-12);
    EXPECT_LT(max_rel(run(p, true, DType::F64, true), reference), 1e-12) << "with gradient destinations";
  }
}

TEST(NestedBackward, EachBackwardRunsTheAccumulatorAndItsEndCallbacksOnce) {
  for (const Placement& p : all_placements()) {
    SCOPED_TRACE(p.name());
    nn::manual_seed(5);
    SharedWeightNet net(p, true, DType::F64);
    std::vector<std::string> order;
    net.w.impl()->add_post_accumulate_hook(nullptr, [&](TensorImpl&) {
      order.push_back("w");
      autograd::queue_end_of_backward_callback([&] { order.push_back("end"); });
    });
    net.v.impl()->add_post_accumulate_hook(nullptr, [&](TensorImpl&) {
      autograd::queue_end_of_outermost_backward_callback([&] { order.push_back("outermost"); });
    });
    Tensor out = net.forward(Tensor::randn({2, 5}, 7, DType::F64));
    autograd::backward(ops::sum(out));
    // w's accumulator runs once in each backward that reaches it: the block's (one per depth) and the
    // outer one when w is used outside the blocks; each queues its own end callback.
    const int runs = p.depth + ((p.before || p.after) ? 1 : 0);
    EXPECT_EQ(std::count(order.begin(), order.end(), "w"), runs);
    EXPECT_EQ(std::count(order.begin(), order.end(), "end"), runs);
    EXPECT_EQ(std::count(order.begin(), order.end(), "outermost"), 1);
  }
}

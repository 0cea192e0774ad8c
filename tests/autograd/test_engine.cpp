// test_engine.cpp - the backward engine: ordering, summation at diamonds, hooks once per backward after
// accumulation, end-of-backward callbacks, no_grad, saved-tensor release, reachability.
#include <gtest/gtest.h>

#include "runtime/autograd/engine.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"
#include "tests/support/gradcheck.h"

using namespace ddp;
using ddp::testing::all_close;

TEST(Engine, DiamondSumsBothPaths) {
  Tensor x = Tensor::from_vector({1, 2, 3}, {3}, DType::F64).set_requires_grad(true);
  Tensor a = x * 2.0, b = x * x;  // y = 2x + x^2, dy/dx = 2 + 2x
  Tensor y = ops::sum(a + b);
  autograd::backward(y);
  EXPECT_TRUE(all_close(x.grad(), {4, 6, 8}, 1e-12));
}

TEST(Engine, ParameterUsedTwiceFiresHookOnceWithSum) {
  Tensor w = Tensor::from_vector({3}, {1}, DType::F64).set_requires_grad(true);
  Tensor x = Tensor::from_vector({2}, {1}, DType::F64);
  int calls = 0;
  double seen = 0;
  w.impl()->add_post_accumulate_hook(nullptr, [&](TensorImpl& p) {
    ++calls;
    seen = Tensor(std::shared_ptr<TensorImpl>(std::shared_ptr<TensorImpl>{}, &p)).grad().item();
  });
  Tensor y = ops::sum(w * x + w * w);  // dy/dw = x + 2w = 8
  autograd::backward(y);
  EXPECT_EQ(calls, 1);
  EXPECT_DOUBLE_EQ(seen, 8.0);  // the hook saw the fully accumulated gradient
}

TEST(Engine, GradAccumulatesAcrossBackwards) {
  Tensor w = Tensor::from_vector({1, 1}, {2}, DType::F64).set_requires_grad(true);
  autograd::backward(ops::sum(w * 3.0));
  autograd::backward(ops::sum(w * 3.0));
  EXPECT_TRUE(all_close(w.grad(), {6, 6}, 1e-12));
}

TEST(Engine, EndOfBackwardCallbacksRunAfterLastNode) {
  Tensor a = Tensor::from_vector({1}, {1}, DType::F64).set_requires_grad(true);
  Tensor b = Tensor::from_vector({1}, {1}, DType::F64).set_requires_grad(true);
  std::vector<std::string> order;
  a.impl()->add_post_accumulate_hook(nullptr, [&](TensorImpl&) {
    order.push_back("a");
    autograd::queue_end_of_backward_callback([&] { order.push_back("callback"); });
  });
  b.impl()->add_post_accumulate_hook(nullptr, [&](TensorImpl&) { order.push_back("b"); });
  autograd::backward(ops::sum(a * 2.0 + b * 3.0));
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order.back(), "callback");
  EXPECT_FALSE(autograd::in_backward());
  EXPECT_THROW(autograd::queue_end_of_backward_callback([] {}), Error);
}

TEST(Engine, CallbackExceptionPropagates) {
  Tensor a = Tensor::from_vector({1}, {1}, DType::F64).set_requires_grad(true);
  a.impl()->add_post_accumulate_hook(nullptr, [&](TensorImpl&) {
    autograd::queue_end_of_backward_callback([] { DDP_FAIL("boom from finalize"); });
  });
  try {
    autograd::backward(ops::sum(a * 2.0));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("boom from finalize"), std::string::npos);
  }
  EXPECT_FALSE(autograd::in_backward());
}

TEST(Engine, NoGradRecordsNothing) {
  Tensor a = Tensor::from_vector({1}, {1}, DType::F64).set_requires_grad(true);
  {
    autograd::NoGradGuard g;
    Tensor y = a * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  Tensor y = a * 2.0;
  EXPECT_TRUE(y.requires_grad());
}

TEST(Engine, SavedTensorsFreedAfterBackward) {
  Tensor a = Tensor::from_vector({1, 2}, {2}, DType::F64).set_requires_grad(true);
  Tensor b = Tensor::from_vector({3, 4}, {2}, DType::F64);
  Tensor y;
  std::weak_ptr<TensorImpl> saved_b;
  {
    Tensor bb = b * 1.0;  // a temporary whose only long-lived owner is the mul node
    saved_b = bb.impl_ptr();
    y = ops::sum(a * bb);
  }
  EXPECT_FALSE(saved_b.expired());
  autograd::backward(y);
  EXPECT_TRUE(saved_b.expired()) << "mul's saved input should be released after backward";
  EXPECT_TRUE(all_close(a.grad(), {3, 4}, 1e-12));
}

TEST(Engine, RetainGraphAllowsSecondBackward) {
  Tensor a = Tensor::from_vector({2}, {1}, DType::F64).set_requires_grad(true);
  Tensor y = ops::sum(a * a);
  autograd::backward(y, {.retain_graph = true});
  autograd::backward(y);
  EXPECT_TRUE(all_close(a.grad(), {8}, 1e-12));
}

TEST(Engine, ReachableLeaves) {
  Tensor a = Tensor::from_vector({1}, {1}, DType::F64).set_requires_grad(true);
  Tensor b = Tensor::from_vector({1}, {1}, DType::F64).set_requires_grad(true);
  Tensor c = Tensor::from_vector({1}, {1}, DType::F64).set_requires_grad(true);
  Tensor y = (a * 2.0 + b) * b;
  std::vector<TensorImpl*> seen;
  autograd::for_each_reachable_leaf({y}, [&](TensorImpl* t) { seen.push_back(t); });
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_NE(std::find(seen.begin(), seen.end(), a.impl()), seen.end());
  EXPECT_NE(std::find(seen.begin(), seen.end(), b.impl()), seen.end());
  EXPECT_EQ(std::find(seen.begin(), seen.end(), c.impl()), seen.end());
}

TEST(Engine, NonScalarNeedsGradient) {
  Tensor a = Tensor::from_vector({1, 2}, {2}, DType::F64).set_requires_grad(true);
  EXPECT_THROW(autograd::backward(a * 2.0), Error);
  EXPECT_THROW(autograd::backward(Tensor::ones({1})), Error);
}

TEST(Elementwise, GradcheckBroadcasting) {
  using ddp::testing::gradcheck;
  using ddp::testing::random_f64;
  std::vector<std::pair<Shape, Shape>> cases = {{{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{2, 1, 5}, {3, 1}},
                                                {{1}, {2, 3}},    {{5}, {1}},    {{1, 1}, {1, 1}}};
  uint64_t seed = 1;
  for (auto& [sa, sb] : cases) {
    Tensor a = random_f64(sa, seed++), b = random_f64(sb, seed++);
    Tensor bpos = Tensor::uniform(sb, seed++, 0.5, 2.0, DType::F64).set_requires_grad(true);
    EXPECT_TRUE(gradcheck([](auto& v) { return v[0] + v[1]; }, {a, b}));
    EXPECT_TRUE(gradcheck([](auto& v) { return v[0] - v[1]; }, {a, b}));
    EXPECT_TRUE(gradcheck([](auto& v) { return v[0] * v[1]; }, {a, b}));
    EXPECT_TRUE(gradcheck([](auto& v) { return v[0] / v[1]; }, {a, bpos}));
    EXPECT_TRUE(gradcheck([](auto& v) { return v[0] * 3.0 + 1.0; }, {a}));
  }
}

TEST(Elementwise, ForwardMatchesReference) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::F64);
  Tensor b = Tensor::from_vector({10, 20, 30}, {3}, DType::F64);
  EXPECT_TRUE(all_close(a + b, {11, 22, 33, 14, 25, 36}, 0));
  EXPECT_TRUE(all_close(a * b, {10, 40, 90, 40, 100, 180}, 0));
  EXPECT_THROW(a + Tensor::ones({2}, DType::F64), Error);
  EXPECT_THROW(a + Tensor::ones({3}, DType::F32), Error);
}

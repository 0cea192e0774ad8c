// test_bf16_weight_cast.cpp - the per-step cache of bf16 weight copies (runtime/ops/bf16_weight_cast.h) on
// the CPU: without a scope bf16_weight converts on every call, inside one it converts each parameter once;
// results are bitwise those without the cache (also through activation checkpointing, whose recompute uses
// the weight again); scopes nest and restore; only parameters are cached; an optimizer step inside a scope
// is an error.
#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "runtime/autograd/engine.h"
#include "runtime/ops/bf16_weight_cast.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/mixed_precision.h"
#include "runtime/optim/optimizer.h"
#include "tests/support/checkpoint_block.h"
#include "tests/support/collective_checks.h"

using namespace ddp;

namespace {
Tensor parameter(const Shape& s, uint64_t seed) {
  Tensor t = Tensor::randn(s, seed);
  t.set_requires_grad(true);
  return t;
}
int64_t casts() { return ops::detail::bf16_weight_casts(); }
}  // namespace

TEST(Bf16WeightCast, WithoutAScopeEveryCallConverts) {
  Tensor w = parameter({4, 3}, 1);
  EXPECT_FALSE(ops::bf16_weight_cast_active());
  const int64_t before = casts();
  Tensor a = ops::bf16_weight(w), b = ops::bf16_weight(w);
  EXPECT_EQ(casts() - before, 2);
  EXPECT_NE(a.data<BFloat16>(), b.data<BFloat16>()) << "two fresh copies";
  EXPECT_EQ(a.dtype(), DType::BF16);
  EXPECT_EQ(a.to_double_vector(), ops::to_bf16(w).to_double_vector());
}

TEST(Bf16WeightCast, AScopeConvertsEachParameterOnceAndKeysByStorageOffsetAndShape) {
  Tensor w = parameter({4, 3}, 1), v = parameter({6}, 2);
  ops::Bf16WeightCast scope;
  EXPECT_TRUE(ops::bf16_weight_cast_active());
  const int64_t before = casts();
  Tensor a = ops::bf16_weight(w);
  EXPECT_EQ(ops::bf16_weight(w).data<BFloat16>(), a.data<BFloat16>()) << "the same copy";
  Tensor w_again = w.detach();  // another tensor over the same storage: the same weight, but not a parameter
  w_again.set_requires_grad(true);
  EXPECT_EQ(ops::bf16_weight(w_again).data<BFloat16>(), a.data<BFloat16>());
  EXPECT_EQ(casts() - before, 1);
  // Other views of one storage are other weights: another shape, another offset.
  Tensor v_rows = v.view({2, 3}), v_tail = v.slice0(3, 6);
  v_rows.set_requires_grad(true);
  v_tail.set_requires_grad(true);
  EXPECT_EQ(ops::bf16_weight(v_rows).shape(), (Shape{2, 3}));
  EXPECT_EQ(ops::bf16_weight(v_tail).to_double_vector(), ops::to_bf16(v_tail.detach()).to_double_vector());
  EXPECT_EQ(casts() - before, 3);
}

TEST(Bf16WeightCast, OnlyParametersAreCached) {
  ops::Bf16WeightCast scope;
  Tensor plain = Tensor::randn({3, 3}, 4);  // a leaf that needs no gradient (e.g. a frozen weight)
  Tensor p = parameter({3, 3}, 5);
  Tensor computed = p * 2.0;  // a weight computed in the step (not a leaf)
  const int64_t before = casts();
  for (int i = 0; i < 2; ++i) {
    (void)ops::bf16_weight(plain);
    (void)ops::bf16_weight(computed);
  }
  EXPECT_EQ(casts() - before, 4);
}

TEST(Bf16WeightCast, ScopesNestAndRestore) {
  Tensor w = parameter({2, 2}, 6);
  ops::Bf16WeightCast outer;
  Tensor a = ops::bf16_weight(w);
  {
    ops::Bf16WeightCast inner;  // its own copies
    const int64_t before = casts();
    Tensor b = ops::bf16_weight(w);
    EXPECT_EQ(casts() - before, 1);
    EXPECT_NE(b.data<BFloat16>(), a.data<BFloat16>());
    {
      ops::Bf16WeightCast off(false);  // no caching inside
      EXPECT_FALSE(ops::bf16_weight_cast_active());
      (void)ops::bf16_weight(w);
      (void)ops::bf16_weight(w);
      EXPECT_EQ(casts() - before, 3);
    }
    EXPECT_TRUE(ops::bf16_weight_cast_active());
    EXPECT_EQ(ops::bf16_weight(w).data<BFloat16>(), b.data<BFloat16>()) << "the inner scope's copy is back";
  }
  EXPECT_EQ(ops::bf16_weight(w).data<BFloat16>(), a.data<BFloat16>()) << "the outer scope's copy is back";
}

TEST(Bf16WeightCast, ScopesArePerThread) {
  ops::Bf16WeightCast scope;
  bool active_elsewhere = true;
  std::thread([&] { active_elsewhere = ops::bf16_weight_cast_active(); }).join();
  EXPECT_FALSE(active_elsewhere);
}

TEST(Bf16WeightCast, AFreedStorageAtTheSameAddressIsANewWeight) {
  ops::Bf16WeightCast scope;
  Tensor first = parameter({8, 8}, 7);
  Tensor a = ops::bf16_weight(first).clone();
  first = Tensor();  // freed; the allocator may hand its memory to the next tensor
  Tensor second = parameter({8, 8}, 8);
  EXPECT_EQ(ops::bf16_weight(second).to_double_vector(), ops::to_bf16(second.detach()).to_double_vector());
}

// A weight used three times by a checkpointed net (before, inside - run again by the recompute - and after):
// with the scope the step converts it once, and gradients and outputs are bitwise those without it.
TEST(Bf16WeightCast, CheckpointedRecomputeReusesTheCopyBitwise) {
  ops::Bf16Compute bf16;
  auto run = [](bool scope, int64_t* conversions) {
    nn::manual_seed(11);
    ddp::testing::SharedWeightNet net({.before = true, .after = true, .depth = 2}, /*use_checkpoint=*/true,
                                      DType::F32);
    Tensor x = Tensor::randn({6, 5}, 12);
    std::optional<ops::Bf16WeightCast> cast;
    if (scope) cast.emplace();
    const int64_t before = casts();
    Tensor y = net.forward(x);
    autograd::backward(ops::sum(y * y));
    *conversions = casts() - before;
    std::vector<std::vector<double>> out{y.to_double_vector()};
    for (const Tensor& p : net.parameters()) out.push_back(p.grad().to_double_vector());
    return out;
  };
  int64_t with_scope = 0, without = 0;
  EXPECT_EQ(run(true, &with_scope), run(false, &without));
  EXPECT_EQ(with_scope, 2) << "w and v, once each";
  // Without: w before, in the block (twice at depth 2) and after, in the forward and again in the recompute.
  EXPECT_GT(without, with_scope);
}

TEST(Bf16WeightCast, AnOptimizerStepInsideAScopeIsAnError) {
  Tensor w = parameter({2, 2}, 9);
  w.set_grad(Tensor::ones({2, 2}));
  optim::SGD sgd({{"w", w}}, {.lr = 0.1});
  optim::AdamW adamw({{"w", w}}, {});
  {
    ops::Bf16WeightCast scope;
    for (optim::Optimizer* opt :
         {static_cast<optim::Optimizer*>(&sgd), static_cast<optim::Optimizer*>(&adamw)}) {
      const std::string e = ddp::testing::error_of([&] { opt->step(); });
      EXPECT_NE(e.find("step: called inside an open ops::Bf16WeightCast scope"), std::string::npos) << e;
      EXPECT_NE(e.find("before the optimizer step"), std::string::npos) << e;
    }
    ops::Bf16WeightCast off(false);  // a scope that does not cache holds nothing a step could change
    sgd.step();
  }
  EXPECT_NO_THROW(adamw.step());
}

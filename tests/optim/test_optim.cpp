// test_optim.cpp - SGD and AdamW against steps computed by hand; parameters without grad are skipped;
// gradient clipping; state round trip.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/optim/optimizer.h"
#include "tests/support/gradcheck.h"

using namespace ddp;
using ddp::testing::all_close;

namespace {
nn::NamedTensor param(const std::string& name, std::vector<double> v) {
  Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::F64);
  t.set_requires_grad(true);
  return {name, t};
}
void set_grad(Tensor& p, std::vector<double> g) {
  p.set_grad(Tensor::from_vector(g, {static_cast<int64_t>(g.size())}, DType::F64));
}
}  // namespace

TEST(SGD, PlainMomentumWeightDecayNesterov) {
  auto w = param("w", {1.0, -2.0});
  optim::SGD sgd({w}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  set_grad(w.tensor, {0.5, 1.0});
  sgd.step();
  // step 1: d = g + wd*w = (0.51, 0.98); buf = d; w -= 0.1*buf
  EXPECT_TRUE(all_close(w.tensor, {1.0 - 0.051, -2.0 - 0.098}, 1e-15));
  set_grad(w.tensor, {0.5, 1.0});
  sgd.step();
  // step 2: d = g + wd*w; buf = 0.9*buf + d
  double w0 = 0.949, w1 = -2.098;
  double d0 = 0.5 + 0.01 * w0, d1 = 1.0 + 0.01 * w1;
  double b0 = 0.9 * 0.51 + d0, b1 = 0.9 * 0.98 + d1;
  EXPECT_TRUE(all_close(w.tensor, {w0 - 0.1 * b0, w1 - 0.1 * b1}, 1e-14));

  auto v = param("v", {1.0});
  optim::SGD nest({v}, {.lr = 0.1, .momentum = 0.5, .nesterov = true});
  set_grad(v.tensor, {2.0});
  nest.step();  // buf = 2; d = 2 + 0.5*2 = 3; v = 1 - 0.3
  EXPECT_TRUE(all_close(v.tensor, {0.7}, 1e-15));
}

TEST(SGD, SkipsParametersWithoutGrad) {
  auto a = param("a", {1.0}), b = param("b", {2.0});
  optim::SGD sgd({a, b}, {.lr = 1.0, .momentum = 0.9});
  set_grad(a.tensor, {1.0});
  sgd.step();
  EXPECT_TRUE(all_close(a.tensor, {0.0}, 0));
  EXPECT_TRUE(all_close(b.tensor, {2.0}, 0));
  EXPECT_EQ(sgd.state().count("b.momentum_buffer"), 0u);
  EXPECT_EQ(sgd.state().count("a.momentum_buffer"), 1u);
}

TEST(AdamW, MatchesHandComputedSteps) {
  auto w = param("w", {1.0, -1.0});
  optim::AdamW adam({w}, {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1});
  double p[2] = {1.0, -1.0}, m[2] = {0, 0}, v[2] = {0, 0};
  double grads[3][2] = {{0.3, -0.2}, {0.1, 0.4}, {-0.5, 0.05}};
  for (int t = 1; t <= 3; ++t) {
    set_grad(w.tensor, {grads[t - 1][0], grads[t - 1][1]});
    adam.step();
    for (int j = 0; j < 2; ++j) {
      double g = grads[t - 1][j];
      p[j] *= 1 - 0.01 * 0.1;
      m[j] = 0.9 * m[j] + 0.1 * g;
      v[j] = 0.999 * v[j] + 0.001 * g * g;
      double mhat = m[j] / (1 - std::pow(0.9, t)), vhat = v[j] / (1 - std::pow(0.999, t));
      p[j] -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
    }
    EXPECT_TRUE(all_close(w.tensor, {p[0], p[1]}, 1e-12)) << "step " << t;
  }
}

TEST(AdamW, StateRoundTripContinuesIdentically) {
  auto a = param("a", {0.5, 0.25}), b = param("a", {0.5, 0.25});
  optim::AdamW o1({a}, {}), o2({b}, {});
  set_grad(a.tensor, {0.1, 0.2});
  o1.step();
  o2.load_state(o1.state(), o1.steps());
  b.tensor.copy_from(a.tensor);
  set_grad(a.tensor, {0.3, -0.1});
  set_grad(b.tensor, {0.3, -0.1});
  o1.step();
  o2.step();
  EXPECT_TRUE(all_close(b.tensor, a.tensor, 0));
}

TEST(Clip, ScalesToMaxNorm) {
  auto a = param("a", {0, 0}), b = param("b", {0});
  set_grad(a.tensor, {3.0, 0.0});
  set_grad(b.tensor, {4.0});
  double n = optim::clip_grad_norm_({a.tensor, b.tensor}, 1.0);
  EXPECT_DOUBLE_EQ(n, 5.0);
  EXPECT_TRUE(all_close(a.tensor.grad(), {0.6, 0.0}, 1e-6));
  EXPECT_TRUE(all_close(b.tensor.grad(), {0.8}, 1e-6));
}

#include "runtime/optim/lr_schedule.h"

TEST(LrSchedule, WarmupThenCosineToMin) {
  optim::WarmupCosine s{.max_lr = 1.0, .min_lr = 0.1, .warmup_steps = 4, .total_steps = 14};
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);
  EXPECT_NEAR(s.at(9), 0.55, 1e-12);  // halfway through the decay
  EXPECT_DOUBLE_EQ(s.at(14), 0.1);
  EXPECT_DOUBLE_EQ(s.at(100), 0.1);
  s.cosine = false;
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
}

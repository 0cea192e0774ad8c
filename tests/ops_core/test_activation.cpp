// test_activation.cpp - relu, gelu (GPT-2 tanh form), tanh, sigmoid, exp, log: forward against <cmath> in
// float64, float32 against float64 (including large inputs that hit the float exp's clamps), gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "runtime/autograd/engine.h"
#include "runtime/ops/activation.h"
#include "tests/support/gradcheck.h"

using namespace ddp;
using ddp::testing::all_close;
using ddp::testing::gradcheck;
using ddp::testing::random_f64;

namespace {
struct ActCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  bool positive_inputs;  // log needs x > 0
};

double gelu_ref(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

std::vector<ActCase> all_cases() {
  return {{"relu", ops::relu, [](double x) { return x > 0 ? x : 0.0; }, false},
          {"gelu", ops::gelu, gelu_ref, false},
          {"tanh", ops::tanh, [](double x) { return std::tanh(x); }, false},
          {"sigmoid", ops::sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, false},
          {"exp", ops::exp, [](double x) { return std::exp(x); }, false},
          {"log", ops::log, [](double x) { return std::log(x); }, true}};
}

Tensor inputs_for(const ActCase& c, const Shape& shape, uint64_t seed, bool requires_grad) {
  Tensor x =
      c.positive_inputs ? Tensor::uniform(shape, seed, 0.1, 3.0, DType::F64) : random_f64(shape, seed, false);
  x.set_requires_grad(requires_grad);
  return x;
}
}  // namespace

TEST(Activation, ForwardMatchesCmath) {
  for (const ActCase& c : all_cases()) {
    for (const Shape& s : {Shape{7}, Shape{1}, Shape{3, 1, 5}, Shape{}}) {
      Tensor x = inputs_for(c, s, 11, false);
      Tensor y = c.op(x);
      EXPECT_EQ(y.shape(), s);
      std::vector<double> expect;
      for (double v : x.to_double_vector()) expect.push_back(c.ref(v));
      EXPECT_TRUE(all_close(y, expect, 1e-14, 1e-13)) << c.name << " " << shape_str(s);
    }
  }
}

TEST(Activation, Float32MatchesFloat64) {
  // 1003 elements (not a multiple of the vector width) over a wide range.
  for (const ActCase& c : all_cases()) {
    Tensor x = c.positive_inputs ? Tensor::uniform({1003}, 3, 1e-3, 50.0, DType::F64)
                                 : Tensor::uniform({1003}, 3, -12.0, 12.0, DType::F64);
    Tensor y64 = c.op(x), y32 = c.op(x.to(DType::F32));
    EXPECT_EQ(y32.dtype(), DType::F32);
    // float32 results within a few ulp of the float64 ones (the vectorised float exp is ~2 ulp).
    EXPECT_TRUE(all_close(y32, y64, 1e-6, 2e-6)) << c.name;
  }
}

TEST(Activation, Float32ExtremeInputs) {
  Tensor x = Tensor::from_vector({-1000, -100, -20, 0, 20, 100, 1000}, {7}, DType::F32);
  EXPECT_TRUE(all_close(ops::gelu(x), {0, 0, 0, 0, 20, 100, 1000}, 1e-6, 1e-7));
  EXPECT_TRUE(all_close(ops::sigmoid(x), {0, 0, 2.0611536e-9, 0.5, 1, 1, 1}, 1e-9, 1e-6));
  for (double v : ops::gelu(x).to_double_vector()) EXPECT_TRUE(std::isfinite(v));
}

TEST(Activation, Gradients) {
  uint64_t seed = 40;
  for (const ActCase& c : all_cases()) {
    for (const Shape& s : {Shape{5}, Shape{1}, Shape{2, 1, 3}}) {
      Tensor x = inputs_for(c, s, seed++, true);
      auto op = c.op;
      EXPECT_TRUE(gradcheck([op](const std::vector<Tensor>& in) { return op(in[0]); }, {x}, 1e-6, 1e-6, 1e-5))
          << c.name << " " << shape_str(s);
    }
  }
}

TEST(Activation, Float32GradientMatchesFloat64) {
  // The float32 backward kernels (vectorised gelu/sigmoid) against the float64 ones.
  for (const ActCase& c : all_cases()) {
    Tensor x64 = c.positive_inputs ? Tensor::uniform({257}, 8, 0.1, 5.0, DType::F64)
                                   : Tensor::uniform({257}, 8, -9.0, 9.0, DType::F64);
    Tensor x32 = x64.to(DType::F32);
    x64.set_requires_grad(true);
    x32.set_requires_grad(true);
    Tensor g64 = Tensor::uniform({257}, 9, -1.0, 1.0, DType::F64);
    autograd::backward({c.op(x64)}, {g64});
    autograd::backward({c.op(x32)}, {g64.to(DType::F32)});
    EXPECT_TRUE(all_close(x32.grad(), x64.grad(), 1e-5, 1e-5)) << c.name;
  }
}

TEST(Activation, RejectsIntegerTensors) { EXPECT_THROW(ops::relu(Tensor::arange(4)), Error); }

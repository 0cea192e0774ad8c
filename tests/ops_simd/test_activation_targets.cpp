// test_activation_targets.cpp - every activation kernel on every instruction set the dispatcher can pick on
// this machine: float32 within the stated tolerance of a float64 <cmath> reference, float64 to ~1e-13, every
// tail length, and the IEEE edge cases (overflow, log of 0 and negatives, NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/activation.h"
#include "tests/ops_simd/simd_test_util.h"

using namespace ddp;
using namespace ddp::testing;
namespace kc = ddp::kernels::cpu;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// GELU's tanh form in double, written as x * sigmoid(2u) (the same function): 0.5 x (1 + tanh(u)) cancels
// for large negative x and would be the less accurate side of the comparison.
double two_u(double x) { return 2 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x); }
double gelu_ref(double x) { return x / (1 + std::exp(-two_u(x))); }
double gelu_grad_ref(double x) {
  const double s = 1 / (1 + std::exp(-two_u(x))), one_minus_s = 1 / (1 + std::exp(two_u(x)));
  return s + x * s * one_minus_s * 2 * std::sqrt(2.0 / M_PI) * (1 + 3 * 0.044715 * x * x);
}
double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct Unary {
  const char* name;
  void (*f32)(const float*, float*, int64_t);
  void (*f64)(const double*, double*, int64_t);
  double (*ref)(double);
  double lo, hi;
};
struct Backward {
  const char* name;
  void (*f32)(const float*, const float*, float*, int64_t);
  void (*f64)(const double*, const double*, double*, int64_t);
  double (*saved)(double);  // what the kernel reads (x, or y = f(x)) from x
  double (*grad)(double);   // df/dx at x
  double lo, hi;
};

const Unary kForward[] = {
    {"relu", kc::relu_forward<float>, kc::relu_forward<double>, [](double x) { return x > 0 ? x : 0.0; }, -5,
     5},
    {"gelu", kc::gelu_forward<float>, kc::gelu_forward<double>, gelu_ref, -12, 12},
    {"tanh", kc::tanh_forward<float>, kc::tanh_forward<double>, [](double x) { return std::tanh(x); }, -20,
     20},
    {"sigmoid", kc::sigmoid_forward<float>, kc::sigmoid_forward<double>, sigmoid_ref, -30, 30},
    {"exp", kc::exp_forward<float>, kc::exp_forward<double>, [](double x) { return std::exp(x); }, -80, 80},
    {"log", kc::log_forward<float>, kc::log_forward<double>, [](double x) { return std::log(x); }, 1e-6, 1e6},
};
const Backward kBackward[] = {
    {"relu", kc::relu_backward<float>, kc::relu_backward<double>, [](double x) { return x; },
     [](double x) { return x > 0 ? 1.0 : 0.0; }, -5, 5},
    {"gelu", kc::gelu_backward<float>, kc::gelu_backward<double>, [](double x) { return x; }, gelu_grad_ref,
     -12, 12},
    {"tanh", kc::tanh_backward<float>, kc::tanh_backward<double>, [](double x) { return std::tanh(x); },
     [](double x) { return 1 - std::tanh(x) * std::tanh(x); }, -5, 5},
    {"sigmoid", kc::sigmoid_backward<float>, kc::sigmoid_backward<double>, sigmoid_ref,
     [](double x) { return sigmoid_ref(x) * (1 - sigmoid_ref(x)); }, -10, 10},
    {"exp", kc::exp_backward<float>, kc::exp_backward<double>, [](double x) { return std::exp(x); },
     [](double x) { return std::exp(x); }, -10, 10},
    {"log", kc::log_backward<float>, kc::log_backward<double>, [](double x) { return x; },
     [](double x) { return 1 / x; }, 0.01, 100},
};
}  // namespace

// Stated tolerances: float32 forward within 4 ulp-ish (rtol 5e-7 * 4) plus 1e-30 absolute; float64 1e-13.
TEST(ActivationTargets, ForwardFloat32AndFloat64MatchCmathOnEveryTarget) {
  for_each_simd_target([](const std::string&) {
    for (const Unary& op : kForward) {
      for (int64_t n : test_lengths()) {
        const std::vector<double> x = spread(n, op.lo, op.hi);
        std::vector<double> ref;
        for (double v : x) ref.push_back(op.ref(static_cast<double>(static_cast<float>(v))));
        std::vector<float> xf = cast_to<float>(x), yf(x.size());
        op.f32(xf.data(), yf.data(), n);
        // gelu: exp(-|2u|) amplifies the float rounding of its argument 2u (up to 142 at x = -12), so its
        // relative tolerance is 3e-5 there; every other forward 2e-6.
        const double rtol = op.f32 == kc::gelu_forward<float> ? 3e-5 : 2e-6;
        EXPECT_TRUE(close_to(yf, ref, 1e-30, rtol)) << op.name << " float32 n=" << n;
        std::vector<double> ref64, y64(x.size());
        for (double v : x) ref64.push_back(op.ref(v));
        op.f64(x.data(), y64.data(), n);
        EXPECT_TRUE(close_to(y64, ref64, 1e-300, 1e-13)) << op.name << " float64 n=" << n;
      }
    }
  });
}

// Backward: dx = g * f'(x) with g in [-2, 2]; float32 against the float64 formula at the float inputs.
TEST(ActivationTargets, BackwardFloat32AndFloat64MatchReferenceOnEveryTarget) {
  for_each_simd_target([](const std::string&) {
    for (const Backward& op : kBackward) {
      for (int64_t n : test_lengths()) {
        const std::vector<double> x = spread(n, op.lo, op.hi), g = spread(n, -2, 2);
        std::vector<float> xf = cast_to<float>(x), gf = cast_to<float>(g), sf(x.size()), dxf(x.size());
        std::vector<double> s64(x.size()), dx64(x.size()), ref32, ref64;
        for (size_t i = 0; i < x.size(); ++i) {
          sf[i] = static_cast<float>(op.saved(static_cast<double>(xf[i])));
          s64[i] = op.saved(x[i]);
          ref32.push_back(static_cast<double>(gf[i]) * op.grad(static_cast<double>(xf[i])));
          ref64.push_back(g[i] * op.grad(x[i]));
        }
        op.f32(gf.data(), sf.data(), dxf.data(), n);
        // 1e-6 absolute: tanh/sigmoid read y rounded to float, whose error 1 - y^2 amplifies near |y| = 1.
        EXPECT_TRUE(close_to(dxf, ref32, 1e-6, 4e-6)) << op.name << " float32 n=" << n;
        op.f64(g.data(), s64.data(), dx64.data(), n);
        EXPECT_TRUE(close_to(dx64, ref64, 1e-15, 1e-12)) << op.name << " float64 n=" << n;
      }
    }
  });
}

TEST(ActivationTargets, IeeeEdgeCasesOnEveryTarget) {
  for_each_simd_target([](const std::string&) {
    const std::vector<double> ex = {100, 89, -200, -104.5, 0, kNaN, kInf, -kInf};
    const std::vector<double> lx = {0, -1, kInf, kNaN, 1, 1e-40};  // 1e-40 is subnormal in float
    const std::vector<double> sx = {100, -100, kNaN, 0, kInf, -kInf};
    auto run32 = [](void (*f)(const float*, float*, int64_t), const std::vector<double>& x) {
      std::vector<float> xf = cast_to<float>(x), y(x.size());
      f(xf.data(), y.data(), static_cast<int64_t>(x.size()));
      return y;
    };
    auto run64 = [](void (*f)(const double*, double*, int64_t), const std::vector<double>& x) {
      std::vector<double> y(x.size());
      f(x.data(), y.data(), static_cast<int64_t>(x.size()));
      return y;
    };
    std::vector<double> eref32, eref64, lref32, lref64, sref;
    for (double v : ex)
      eref32.push_back(static_cast<float>(std::exp(static_cast<double>(static_cast<float>(v)))));
    for (double v : ex) eref64.push_back(std::exp(v));
    for (double v : lx) lref32.push_back(std::log(static_cast<double>(static_cast<float>(v))));
    for (double v : lx) lref64.push_back(std::log(v));
    for (double v : sx) sref.push_back(std::isnan(v) ? v : sigmoid_ref(v));
    EXPECT_TRUE(close_to(run32(kc::exp_forward<float>, ex), eref32, 1e-44, 2e-6));
    EXPECT_TRUE(close_to(run64(kc::exp_forward<double>, ex), eref64, 1e-300, 1e-13));
    EXPECT_TRUE(close_to(run32(kc::log_forward<float>, lx), lref32, 0, 2e-6));
    EXPECT_TRUE(close_to(run64(kc::log_forward<double>, lx), lref64, 0, 1e-13));
    EXPECT_TRUE(close_to(run32(kc::sigmoid_forward<float>, sx), sref, 1e-40, 2e-6));
    EXPECT_TRUE(close_to(run32(kc::tanh_forward<float>, {kNaN, kInf, -kInf, 30}), {kNaN, 1, -1, 1}, 0, 0));
    const std::vector<float> g = run32(kc::gelu_forward<float>, {kNaN, 30, -30});
    EXPECT_TRUE(std::isnan(g[0]));
    EXPECT_EQ(g[1], 30.0f);
    EXPECT_LE(std::fabs(g[2]), 1e-30f);
  });
}

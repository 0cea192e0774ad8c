// test_optim_fused.cpp - the fused (vectorized) SGD and AdamW steps against a plain per-element loop of
// PyTorch's formulas in float64, on lengths with and without a vector tail, in float64 (to rounding) and in
// float32 (constants formed in double, as PyTorch does: 1 - beta2 must be 1e-3, not 1 - float(0.999)).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/optim/optimizer.h"
#include "tests/support/gradcheck.h"

using namespace ddp;
using ddp::testing::all_close;

namespace {
std::vector<double> values(int64_t n, double scale, int salt) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = scale * std::sin(0.37 * static_cast<double>(i + 1) * salt);
  return v;
}
nn::NamedTensor param(std::vector<double> v, DType dt) {
  Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::F64).to(dt);
  t.set_requires_grad(true);
  return {"w", t};
}
}  // namespace

TEST(FusedSGD, MatchesPerElementLoopForEveryOptionAndLength) {
  struct Case {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  for (const Case& c : {Case{0, 0, 0, false}, Case{0.9, 0, 0.01, false}, Case{0.9, 0.1, 0, false},
                        Case{0.8, 0, 0.05, true}, Case{0, 0, 0.1, false}}) {
    for (int64_t n : {1, 7, 16, 37, 300}) {
      std::vector<double> w = values(n, 1.0, 1), buf(static_cast<size_t>(n), 0.0);
      auto p = param(w, DType::F64);
      optim::SGD sgd({p}, {.lr = 0.05,
                           .momentum = c.momentum,
                           .dampening = c.dampening,
                           .weight_decay = c.weight_decay,
                           .nesterov = c.nesterov});
      for (int step = 0; step < 3; ++step) {
        const std::vector<double> g = values(n, 0.5, step + 2);
        p.tensor.set_grad(Tensor::from_vector(g, {n}, DType::F64));
        sgd.step();
        for (int64_t i = 0; i < n; ++i) {
          double d = g[i] + c.weight_decay * w[i];
          if (c.momentum != 0) {
            buf[i] = step == 0 ? d : c.momentum * buf[i] + (1 - c.dampening) * d;
            d = c.nesterov ? d + c.momentum * buf[i] : buf[i];
          }
          w[i] -= 0.05 * d;
        }
        EXPECT_TRUE(all_close(p.tensor, w, 1e-15, 1e-14))
            << "momentum " << c.momentum << " nesterov " << c.nesterov << " n " << n << " step " << step;
      }
    }
  }
}

TEST(FusedAdamW, Float32StateUsesConstantsFormedInDouble) {
  // After one step v = (1 - beta2) g^2 exactly up to float rounding. With 1 - beta2 formed in float
  // (1 - 0.999f = 9.9998713e-4) v is off by 1.3e-5 relative, far outside the 1e-6 allowed here.
  const int64_t n = 37;
  const std::vector<double> g = values(n, 0.5, 3);
  auto p = param(values(n, 1.0, 1), DType::F32);
  optim::AdamW adam({p}, {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01});
  p.tensor.set_grad(Tensor::from_vector(g, {n}, DType::F64).to(DType::F32));
  adam.step();
  std::vector<double> v_ref, m_ref;
  for (double gi : g) {
    const double gf = static_cast<float>(gi);
    v_ref.push_back((1 - 0.999) * gf * gf);
    m_ref.push_back((1 - 0.9) * gf);
  }
  const auto state = adam.state();
  EXPECT_TRUE(all_close(state.at("w.exp_avg_sq"), v_ref, 0, 1e-6));
  EXPECT_TRUE(all_close(state.at("w.exp_avg"), m_ref, 0, 1e-6));
}

TEST(FusedAdamW, Float32TracksFloat64OverSteps) {
  for (int64_t n : {5, 16, 100}) {
    auto p32 = param(values(n, 1.0, 1), DType::F32), p64 = param(values(n, 1.0, 1), DType::F64);
    optim::AdamW a32({p32}, {}), a64({p64}, {});
    for (int step = 0; step < 5; ++step) {
      const std::vector<double> g = values(n, 0.5, step + 2);
      p32.tensor.set_grad(Tensor::from_vector(g, {n}, DType::F64).to(DType::F32));
      p64.tensor.set_grad(Tensor::from_vector(g, {n}, DType::F64));
      a32.step();
      a64.step();
    }
    EXPECT_TRUE(all_close(p32.tensor, p64.tensor.to_double_vector(), 1e-6, 1e-6)) << "n " << n;
  }
}

// gradcheck.cpp - central finite differences against the autograd engine, in float64.
#include "tests/support/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "runtime/autograd/engine.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"

namespace ddp::testing {

Tensor random_f64(const Shape& shape, uint64_t seed, bool requires_grad) {
  Tensor t = Tensor::randn(shape, seed, DType::F64);
  t.set_requires_grad(requires_grad);
  return t;
}

::testing::AssertionResult gradcheck(const OpFn& f, const std::vector<Tensor>& inputs, double eps,
                                     double atol, double rtol) {
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad() && t.dtype() != DType::F64)
      return ::testing::AssertionFailure() << "gradcheck needs float64 inputs";
  Tensor out0 = f(inputs);
  Tensor w = Tensor::randn(out0.shape(), 12345, DType::F64);
  auto loss_of = [&](const std::vector<Tensor>& xs) {
    Tensor y = f(xs);
    return ops::sum(ops::mul(y, w));
  };
  // analytic
  for (const Tensor& t : inputs)
    if (t.defined()) t.impl()->grad.reset();
  Tensor loss = loss_of(inputs);
  autograd::backward(loss);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    Tensor g = x.grad();
    std::vector<double> analytic = g.defined() ? g.to_double_vector() : std::vector<double>(x.numel(), 0.0);
    double* px = x.data<double>();
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double orig = px[j];
      double lp, lm;
      {
        autograd::NoGradGuard ng;
        px[j] = orig + eps;
        lp = loss_of(inputs).item();
        px[j] = orig - eps;
        lm = loss_of(inputs).item();
        px[j] = orig;
      }
      const double numeric = (lp - lm) / (2 * eps);
      if (!(std::fabs(analytic[j] - numeric) <= atol + rtol * std::fabs(numeric)))
        return ::testing::AssertionFailure()
               << "input " << k << " element " << j << ": analytic " << analytic[j] << " vs numeric "
               << numeric << " (shape " << shape_str(x.shape()) << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult all_close(const Tensor& actual, const std::vector<double>& expected, double atol,
                                     double rtol) {
  std::vector<double> a = actual.to_double_vector();
  if (a.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << a.size() << " vs expected " << expected.size();
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(std::fabs(a[i] - expected[i]) <= atol + rtol * std::fabs(expected[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs expected "
                                           << expected[i] << " (atol " << atol << ", rtol " << rtol << ")";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double atol, double rtol) {
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure()
           << "shape " << shape_str(actual.shape()) << " vs " << shape_str(expected.shape());
  return all_close(actual, expected.to_double_vector(), atol, rtol);
}

::testing::AssertionResult close_relative_to_max(const Tensor& actual, const Tensor& expected, double tol) {
  const auto as_doubles = [](const Tensor& t) {
    return t.detach().to(Device::cpu()).to(DType::F64).to_double_vector();
  };
  const std::vector<double> x = as_doubles(actual), y = as_doubles(expected);
  if (x.size() != y.size())
    return ::testing::AssertionFailure() << x.size() << " elements vs " << y.size() << " expected";
  double err = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  if (err <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max error " << err << " > " << tol << " x max |expected| " << scale;
}

}  // namespace ddp::testing

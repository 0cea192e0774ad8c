// gradcheck.h - test helpers: finite-difference gradient check in float64 (like torch.autograd.gradcheck)
// and element-wise comparison of a tensor against reference values with a stated tolerance.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace ddp::testing {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks the analytic gradients of L = sum(f(inputs) * W) (W fixed random weights) against central
// differences with step eps, for every input that requires grad. Inputs must be float64 CPU tensors.
// Passes when |analytic - numeric| <= atol + rtol * |numeric| for every element.
::testing::AssertionResult gradcheck(const OpFn& f, const std::vector<Tensor>& inputs, double eps = 1e-6,
                                     double atol = 1e-6, double rtol = 1e-5);

// |actual[i] - expected[i]| <= atol + rtol * |expected[i]| for all i (and equal element counts).
::testing::AssertionResult all_close(const Tensor& actual, const std::vector<double>& expected, double atol,
                                     double rtol = 0);
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double atol,
                                     double rtol = 0);

// max_i |actual[i] - expected[i]| <= tol * max_i |expected[i]| (and equal element counts), on any device and
// floating dtype: the bound for low-precision results (bf16) whose error scales with the tensor's largest value.
::testing::AssertionResult close_relative_to_max(const Tensor& actual, const Tensor& expected, double tol);

// A float64 CPU tensor with values from a seeded normal distribution, optionally requiring grad.
Tensor random_f64(const Shape& shape, uint64_t seed, bool requires_grad = true);

}  // namespace ddp::testing

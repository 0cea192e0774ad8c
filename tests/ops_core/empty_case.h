// empty_case.h - the harness of the empty-tensor tests: runs an op's forward and backward (seeded with
// ones) on inputs with a dimension of size 0, after a large call of the same op on the same thread (so any
// reused per-thread scratch holds stale partial sums) or alone on a fresh std::thread (nothing allocated
// yet), and compares the output and every input's gradient with the mathematically right values (NaN where
// the right value is NaN).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/autograd/engine.h"
#include "runtime/core/error.h"
#include "runtime/tensor/tensor.h"

namespace ddp::testing {

using Inputs = std::vector<Tensor>;
using MakeInputs = std::function<Inputs(int64_t rows, int64_t cols, DType dtype)>;
using ApplyOp = std::function<Tensor(const Inputs&)>;

// What the op must give: the output's shape and values, then per input its gradient's values (an input that
// needs no gradient: an empty entry and no check).
struct Expected {
  Shape out_shape;
  std::vector<double> out;
  std::vector<std::vector<double>> grads;
};
using Expect = std::function<Expected(int64_t rows, int64_t cols, const Inputs& inputs)>;

struct EmptyCase {
  std::string name;
  MakeInputs make;
  ApplyOp op;
  Expect expect;
  int64_t large_rows = 520, large_cols = 300;  // the large call run first on the same thread (rows > 256:
                                               // the column sums use their per-thread scratch)
};

inline std::vector<double> filled(int64_t n, double v) {
  return std::vector<double>(static_cast<size_t>(n), v);
}
// A leaf with seeded normal values that requires grad.
inline Tensor leaf(const Shape& shape, DType dtype, uint64_t seed) {
  return Tensor::randn(shape, seed, dtype).set_requires_grad(true);
}

// Forward, then backward with a ones seed when the output takes part in autograd.
inline std::pair<Tensor, Inputs> forward_backward(const EmptyCase& c, const Inputs& inputs) {
  Tensor out = c.op(inputs);
  if (out.requires_grad()) autograd::backward({out}, {Tensor::ones(out.shape(), out.dtype(), out.device())});
  Inputs grads;
  for (const Tensor& t : inputs) grads.push_back(t.requires_grad() ? t.grad() : Tensor());
  return {out, grads};
}

inline ::testing::AssertionResult same_values(const Tensor& t, const Shape& shape,
                                              const std::vector<double>& want, double rtol) {
  if (!t.defined()) return ::testing::AssertionFailure() << "undefined tensor";
  if (t.shape() != shape)
    return ::testing::AssertionFailure() << "shape " << shape_str(t.shape()) << ", want " << shape_str(shape);
  const std::vector<double> got = t.to_double_vector();
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " values, want " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isnan(want[i])
                        ? std::isnan(got[i])
                        : std::abs(got[i] - want[i]) <= rtol * std::max(1.0, std::abs(want[i]));
    if (!ok)
      return ::testing::AssertionFailure() << "value " << i << " is " << got[i] << ", want " << want[i];
  }
  return ::testing::AssertionSuccess();
}

// The empty call (rows x cols) and its checks; records failures with the case, shape and dtype named.
inline void check_empty_call(const EmptyCase& c, int64_t rows, int64_t cols, DType dtype) {
  SCOPED_TRACE(c.name + " rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " " +
               std::string(dtype_name(dtype)));
  const Inputs inputs = c.make(rows, cols, dtype);
  const Expected want = c.expect(rows, cols, inputs);
  auto [out, grads] = forward_backward(c, inputs);
  const double rtol = dtype == DType::F32 ? 1e-6 : 1e-13;
  EXPECT_TRUE(same_values(out, want.out_shape, want.out, rtol)) << "output";
  if (!out.requires_grad()) return;  // not differentiable (e.g. sum_of_squares): no backward ran
  for (size_t i = 0; i < want.grads.size() && i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    EXPECT_TRUE(same_values(grads[i], inputs[i].shape(), want.grads[i], rtol)) << "gradient of input " << i;
  }
}

// Every (rows, cols) in `shapes`, float32 and float64: each after a large call of the op on this thread, and
// each alone on a fresh thread.
inline void check_case(const EmptyCase& c, const std::vector<std::pair<int64_t, int64_t>>& shapes) {
  for (DType dtype : {DType::F32, DType::F64})
    for (auto [rows, cols] : shapes) {
      forward_backward(c, c.make(c.large_rows, c.large_cols, dtype));
      check_empty_call(c, rows, cols, dtype);
      std::thread fresh([&] { check_empty_call(c, rows, cols, dtype); });
      fresh.join();
    }
}

// Boundary shapes with no rows (columns 1, a prime, the 16-wide blocks +-1, the 512-wide tile +-1) and with
// no columns (rows 1, a prime, the 256-row super-block +-1).
inline std::vector<std::pair<int64_t, int64_t>> no_rows() {
  return {{0, 1}, {0, 7}, {0, 15}, {0, 16}, {0, 17}, {0, 511}, {0, 512}, {0, 513}};
}
inline std::vector<std::pair<int64_t, int64_t>> no_cols() {
  return {{1, 0}, {7, 0}, {255, 0}, {256, 0}, {257, 0}};
}
inline std::vector<std::pair<int64_t, int64_t>> no_rows_nor_cols() {
  auto s = no_rows();
  for (auto e : no_cols()) s.push_back(e);
  s.push_back({0, 0});
  return s;
}

}  // namespace ddp::testing

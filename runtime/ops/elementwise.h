// elementwise.h - differentiable binary ops with NumPy broadcasting (add, sub, mul, div) and scalar ops.
#pragma once
#include "runtime/tensor/tensor.h"

namespace ddp::ops {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add_scalar(const Tensor& a, double s);
Tensor mul_scalar(const Tensor& a, double s);
Tensor neg(const Tensor& a);

}  // namespace ddp::ops

namespace ddp {
inline Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return ops::div(a, b); }
inline Tensor operator+(const Tensor& a, double s) { return ops::add_scalar(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return ops::add_scalar(a, -s); }
inline Tensor operator*(const Tensor& a, double s) { return ops::mul_scalar(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return ops::mul_scalar(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return ops::mul_scalar(a, 1.0 / s); }
inline Tensor operator-(const Tensor& a) { return ops::neg(a); }
}  // namespace ddp

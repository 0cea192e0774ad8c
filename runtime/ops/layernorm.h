// layernorm.h - differentiable layer normalization over the last dimension (GPT-2's ln_1, ln_2, ln_f).
#pragma once
#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// x: (..., C), weight: (C), bias: (C) -> (..., C):
//   y = (x - mean) / sqrt(var + eps) * weight + bias, mean and (biased) var over the last dimension.
// Forward saves mean and 1/sqrt(var + eps) per row; backward gives dx, dweight and dbias.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

}  // namespace ddp::ops

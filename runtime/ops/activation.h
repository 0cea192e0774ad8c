// activation.h - differentiable pointwise activations (same shape in and out; float32/float64 on
// CPU, float32/float64 on CUDA).
#pragma once
#include "runtime/tensor/tensor.h"

namespace ddp::ops {

Tensor relu(const Tensor& x);
// GPT-2's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
Tensor gelu(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);  // natural log; x <= 0 gives -inf / NaN as in IEEE arithmetic

}  // namespace ddp::ops

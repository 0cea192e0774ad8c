// softmax.h - differentiable softmax and log-softmax over the last dimension (numerically stable: each row
// subtracts its max before exp). For a classification loss use ops::cross_entropy (loss.h), which fuses
// log-softmax with the likelihood and never materialises the probabilities.
#pragma once
#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// x: (..., C) -> (..., C), each row over C sums to 1.
Tensor softmax(const Tensor& x);
// x: (..., C) -> (..., C), log(softmax(x)) computed as x - max - log(sum(exp(x - max))).
Tensor log_softmax(const Tensor& x);

}  // namespace ddp::ops

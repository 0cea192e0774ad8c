// reduce.h - differentiable reductions: sum and mean over all elements or over given dimensions.
#pragma once
#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// Sum of all elements -> shape () (a scalar tensor).
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);

}  // namespace ddp::ops

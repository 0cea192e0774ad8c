// reduce.h - differentiable reductions: sum and mean over all elements or over given dimensions.
// float32 sums accumulate in double (CPU and CUDA), so long sums stay accurate.
#pragma once
#include <vector>

#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// Sum of all elements -> shape () (a scalar tensor). Over nothing (an empty tensor or dimension of size 0)
// a sum is 0 and a mean NaN, as in PyTorch; the gradient of an empty input is empty.
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);

// x: (d0, d1, ...) -> sum over `dims` (negative counts from the end; each at most once; an empty list means
// every dimension). keepdim keeps the reduced dimensions as size 1, otherwise they are removed.
// e.g. x: (B, T, C), dims {-1} -> (B, T); keepdim -> (B, T, 1)
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

}  // namespace ddp::ops

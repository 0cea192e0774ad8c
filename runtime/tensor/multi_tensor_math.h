// multi_tensor_math.h - arithmetic over a whole list of tensors, for gradient-norm clipping
// (optim::clip_grad_norm_ and ZeRO-2/3's ShardedDataParallel::clip_grad_norm_): the sum of squares, and the
// clip from a sum of squares. On CUDA it all stays on the device (kernels/cuda/multi_tensor.h: a few launches
// for the whole list, a deterministic reduction in double, the clip coefficient read by the scale kernel from
// device memory) and the host reads nothing. On the CPU it is ddp::sum_of_squares and ddp::scale_, tensor by
// tensor, the same numbers as before. Every tensor of a list must be on `device`; float32 or float64.
#pragma once
#include <vector>

#include "runtime/tensor/tensor.h"

namespace ddp {

// The sum of x * x over every element of every tensor, as a float64 tensor of shape {1} on `device` (CUDA: a
// fixed-order reduction, the same bits on every run; CPU: the running sum in list order).
Tensor sum_of_squares_tensor(const std::vector<Tensor>& tensors, Device device);

// With `sum_of_squares` (float64, one element, on `device`) the squared global L2 norm of `tensors`: scales
// every tensor by max_norm / (norm + 1e-6) when norm > max_norm (and > 0); returns the norm, a float64 scalar
// tensor (shape {}) on `device`.
Tensor clip_by_sum_of_squares_(const std::vector<Tensor>& tensors, const Tensor& sum_of_squares,
                               double max_norm, Device device);

}  // namespace ddp

// tensor_math.h - in-place arithmetic on whole tensors without autograd, for the engine (summing
// gradients), the optimizers and the DDP reducer (scaling a gradient into its bucket slot).
// Shapes must have equal element counts; devices and dtypes must match.
#pragma once
#include "runtime/tensor/tensor.h"

namespace ddp {

// dst += alpha * src
void add_(Tensor& dst, const Tensor& src, double alpha = 1.0);
// dst *= s
void scale_(Tensor& dst, double s);
// dst = src * s (a copy and a scale in one pass)
void copy_scaled_(Tensor& dst, const Tensor& src, double s);
// Sum of squares of all elements, a running float64 sum on the host (a CUDA tensor is copied to the host first:
// a reference; gradient-norm clipping on CUDA stays on the device, runtime/tensor/multi_tensor_math.h).
double sum_of_squares(const Tensor& t);

}  // namespace ddp

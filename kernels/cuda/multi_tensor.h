// multi_tensor.h - kernels over a whole list of tensors at once: the sum of squares and clip of gradient-norm
// clipping, and the SGD and AdamW steps. Each call plans the list (kernels/cpu/multi_tensor.h: a table of
// pointers, lengths and per-tensor scalars passed as the kernel argument, one block per (tensor, chunk)) and
// issues one launch per table's worth of tensors instead of one per tensor. float32 and float64; one dtype
// per call (the caller groups a mixed list). Nothing here reads device memory on the host.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "runtime/core/dtype.h"

namespace ddp::kernels::cuda {

// The room of one launch's table: at most this many tensors and blocks (more: several launches).
int multi_tensor_max_tensors();
int multi_tensor_max_blocks();

// ---- gradient-norm clipping, all on the device ----
// How many per-block partials multi_tensor_sum_of_squares_partials writes for tensors of `sizes`.
int64_t sum_of_squares_partial_count(const std::vector<int64_t>& sizes);
// partials[k] = the sum of x * x (in double, fused) over block k's chunk, in a fixed order; k over the plan's
// blocks of the list in list order.
void multi_tensor_sum_of_squares_partials(const std::vector<const void*>& data,
                                          const std::vector<int64_t>& sizes, DType dtype, double* partials,
                                          cudaStream_t stream);
// *out = the sum of partials[0, count) in a fixed order (one block); 0 for count 0.
void sum_partials(const double* partials, int64_t count, double* out, cudaStream_t stream);
// *norm = sqrt(*sum_of_squares); *coefficient = max_norm / (norm + 1e-6) when norm > max_norm (and > 0),
// else 1 - the rule of optim::clip_grad_norm_ on the CPU, so both scale by the same double.
void clip_coefficient(const double* sum_of_squares, double max_norm, double* norm, double* coefficient,
                      cudaStream_t stream);
// x *= T(*coefficient) for every element of every tensor; a coefficient of exactly 1 writes nothing.
void multi_tensor_scale(const std::vector<void*>& data, const std::vector<int64_t>& sizes, DType dtype,
                        const double* coefficient, cudaStream_t stream);

// ---- optimizer steps: the per-element math of kernels/cpu/optim_math.h, as kernels/cuda/optim.cu ----
// momentum[i] null: parameter i has no momentum buffer; first[i]: its buffer's first step (buf = d).
void multi_tensor_sgd_step(const std::vector<void*>& params, const std::vector<const void*>& grads,
                           const std::vector<void*>& momentum, const std::vector<uint8_t>& first,
                           const std::vector<int64_t>& sizes, DType dtype, double lr, double momentum_factor,
                           double dampening, double weight_decay, bool nesterov, cudaStream_t stream);
// bias_correction1[i], bias_correction2[i]: 1 - beta^t for parameter i's own step count t.
void multi_tensor_adamw_step(const std::vector<void*>& params, const std::vector<const void*>& grads,
                             const std::vector<void*>& exp_avg, const std::vector<void*>& exp_avg_sq,
                             const std::vector<int64_t>& sizes, DType dtype, double lr, double beta1,
                             double beta2, double eps, double weight_decay,
                             const std::vector<double>& bias_correction1,
                             const std::vector<double>& bias_correction2, cudaStream_t stream);

}  // namespace ddp::kernels::cuda

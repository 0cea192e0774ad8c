// optim.h - fused optimizer update kernels, one tensor per launch (one pass over parameter, gradient and
// state); multi_tensor.h steps a whole list per launch with the same per-element math.
#pragma once
#include <cuda_runtime.h>

#include "runtime/core/dtype.h"

namespace ddp::kernels::cuda {
void sgd_step(void* param, const void* grad, void* momentum /* or null */, DType dtype, int64_t n, double lr,
              double momentum_factor, double dampening, double weight_decay, bool nesterov, bool first_step,
              cudaStream_t stream);
void adamw_step(void* param, const void* grad, void* exp_avg, void* exp_avg_sq, DType dtype, int64_t n,
                double lr, double beta1, double beta2, double eps, double weight_decay,
                double bias_correction1, double bias_correction2, cudaStream_t stream);
}  // namespace ddp::kernels::cuda

// layernorm.h - CUDA layer norm over the last dimension (float32, float64; a bf16 y and dy for bf16 compute);
// same contracts as kernels/cpu/layernorm.h, launched on `stream`.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/core/dtype.h"

namespace ddp::kernels::cuda {

// x, y: (rows, cols); weight, bias: (cols); writes mean, rstd: (rows). T, Y: float, float / double, double /
// float, BFloat16 - bf16 compute's y (runtime/ops/layernorm.h, layer_norm_bf16_output), rounded once.
template <class T, class Y>
void layernorm_forward(const T* x, const T* weight, const T* bias, Y* y, T* mean, T* rstd, int64_t rows,
                       int64_t cols, double eps, cudaStream_t stream);
// dx: (rows, cols), dweight, dbias: (cols); any of them may be null. DY: T, or BFloat16 with T float - the
// gradient of a bf16 y, read as its exact float32 values.
template <class T, class DY>
void layernorm_backward(const DY* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx,
                        T* dweight, T* dbias, int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace ddp::kernels::cuda

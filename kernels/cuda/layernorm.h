// layernorm.h - CUDA layer norm over the last dimension (float32, float64; a bf16 y and dy for bf16 compute);
// same contracts as kernels/cpu/layernorm.h, launched on `stream`.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/core/dtype.h"

namespace ddp::kernels::cuda {

// x, y: (rows, cols); weight, bias: (cols); writes mean, rstd: (rows).
template <class T>
void layernorm_forward(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t rows,
                       int64_t cols, double eps, cudaStream_t stream);
// bf16 compute (runtime/ops/layernorm.h, layer_norm_bf16_output): y rounded to bfloat16 once.
void layernorm_forward(const float* x, const float* weight, const float* bias, BFloat16* y, float* mean,
                       float* rstd, int64_t rows, int64_t cols, double eps, cudaStream_t stream);
// dx: (rows, cols), dweight, dbias: (cols); any of them may be null.
template <class T>
void layernorm_backward(const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx,
                        T* dweight, T* dbias, int64_t rows, int64_t cols, cudaStream_t stream);
// The gradient of a bfloat16 y: dy read as bf16 (exact float32 values), the rest float32.
void layernorm_backward(const BFloat16* dy, const float* x, const float* weight, const float* mean,
                        const float* rstd, float* dx, float* dweight, float* dbias, int64_t rows,
                        int64_t cols, cudaStream_t stream);

}  // namespace ddp::kernels::cuda

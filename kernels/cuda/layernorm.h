// layernorm.h - CUDA layer norm over the last dimension (float32, float64); same contracts as
// kernels/cpu/layernorm.h, launched on `stream`.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace ddp::kernels::cuda {

// x, y: (rows, cols); weight, bias: (cols); writes mean, rstd: (rows).
template <class T>
void layernorm_forward(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t rows,
                       int64_t cols, double eps, cudaStream_t stream);
// dx: (rows, cols), dweight, dbias: (cols); any of them may be null.
template <class T>
void layernorm_backward(const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx,
                        T* dweight, T* dbias, int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace ddp::kernels::cuda

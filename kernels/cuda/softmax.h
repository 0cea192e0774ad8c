// softmax.h - CUDA softmax / log-softmax over the last dimension (one block per row), float32 and float64.
// Same contracts as kernels/cpu/softmax.h, launched on `stream`.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace ddp::kernels::cuda {

// x, y: (rows, cols); y may alias x.
template <class T>
void softmax_forward(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream);
template <class T>
void log_softmax_forward(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream);
// dx = y (dy - sum(y dy)) / dx = dy - exp(y) sum(dy), y the saved output.  all (rows, cols).
template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols, cudaStream_t stream);
template <class T>
void log_softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace ddp::kernels::cuda

// pool.h - 2-D max and average pooling on the GPU (float32, float64), same contract and names as
// kernels/cpu/pool.h. Backward kernels gather (one thread per input pixel), so they are deterministic.
#pragma once
#include <cuda_runtime.h>

#include "kernels/cpu/pool.h"

namespace ddp::kernels::cuda {
using cpu::PoolGeometry;

template <class T>
void max_pool2d_forward(const T* x, T* y, int32_t* argmax, const PoolGeometry& g, cudaStream_t stream);
template <class T>
void max_pool2d_backward(const T* dy, const int32_t* argmax, T* dx, const PoolGeometry& g,
                         cudaStream_t stream);
template <class T>
void avg_pool2d_forward(const T* x, T* y, const PoolGeometry& g, cudaStream_t stream);
template <class T>
void avg_pool2d_backward(const T* dy, T* dx, const PoolGeometry& g, cudaStream_t stream);

}  // namespace ddp::kernels::cuda

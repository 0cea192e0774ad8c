// axpy.h - y = beta*y + alpha*x on the GPU (float32, float64, bfloat16); the engine,
// optimizers and reducer use it.
#pragma once
#include <cuda_runtime.h>

#include "runtime/core/dtype.h"

namespace ddp::kernels::cuda {
void axpby(void* y, const void* x, DType dtype, double beta, double alpha, int64_t n, cudaStream_t stream);
}  // namespace ddp::kernels::cuda

// convert.h - dtype conversion, fill and arange on the GPU (used by Tensor::to(DType), fill_ and arange).
#pragma once
#include <cuda_runtime.h>

#include "runtime/core/dtype.h"

namespace ddp::kernels::cuda {
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, cudaStream_t stream);
void fill(void* dst, DType dtype, double value, int64_t n, cudaStream_t stream);
// dst[i] = i for i in [0, n) (exact up to 2^53, as the CPU's Tensor::arange through double).
void arange(void* dst, DType dtype, int64_t n, cudaStream_t stream);
}  // namespace ddp::kernels::cuda

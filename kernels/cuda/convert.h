// convert.h - dtype conversion and fill on the GPU (used by Tensor::to(DType) and fill_).
#pragma once
#include <cuda_runtime.h>

#include "runtime/core/dtype.h"

namespace ddp::kernels::cuda {
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, cudaStream_t stream);
void fill(void* dst, DType dtype, double value, int64_t n, cudaStream_t stream);
}  // namespace ddp::kernels::cuda

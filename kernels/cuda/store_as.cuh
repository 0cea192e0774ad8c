// store_as.cuh - one element written in a tensor's storage type from the float type a kernel computes in:
// a plain store for float32 / float64, and for bfloat16 the value rounded to nearest even (the GPU's
// __float2bfloat16, as kernels/cpu/bf16's to_bf16 rounds). Its read twin is widen_to (column_sum_plan.h).
#pragma once
#include <cuda_bf16.h>

#include "runtime/core/dtype.h"

namespace ddp::kernels::cuda {

template <class T>
__device__ inline void store_as(T* p, T v) {
  *p = v;
}
__device__ inline void store_as(BFloat16* p, float v) { p->bits = __bfloat16_as_ushort(__float2bfloat16(v)); }

}  // namespace ddp::kernels::cuda

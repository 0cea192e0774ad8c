// convert.h - dtype conversion of host arrays, vectorized with Google Highway (per instruction set, chosen at
// run time) and split across the thread budget, for the conversions training uses: float32 <-> float64 and
// float32 <-> bfloat16 (round to nearest even, NaN kept quiet: the same bits as BFloat16::from_float).
// The CUDA kernel of the same name is kernels/cuda/convert.h.
#pragma once
#include <cstdint>

#include "runtime/core/dtype.h"

namespace ddp::kernels::cpu {
// Converts n elements from src (src_dtype) to dst (dst_dtype) when the pair is one of the vectorized ones
// and returns true; returns false (nothing written) for any other pair.
bool convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);
}  // namespace ddp::kernels::cpu

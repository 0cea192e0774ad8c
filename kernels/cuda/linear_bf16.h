// linear_bf16.h - the bf16 linear's GEMM with its bias in one cuBLASLt matmul (linear_bf16.cu), for
// runtime/ops/linalg_bf16.cpp's linear and the fused MLP's projection (runtime/ops/mlp_bf16.cpp).
#pragma once
#include <cstdint>

#include "kernels/cuda/workspace.h"
#include "runtime/core/dtype.h"

namespace ddp::kernels::cuda {

// y (rows, out) float32 = x (rows, in) w^T (w: out x in, both bf16) + bias (out, float32), on the current
// stream. False (nothing enqueued) when cuBLASLt has no algorithm for the shape: the caller broadcasts the
// bias and runs a GEMM with beta = 1, which sums the same (the float32 accumulator plus the float32 bias,
// rounded once). rows == 0 is done at once; in must be > 0.
bool linear_bias_bf16(int64_t rows, int64_t out, int64_t in, const BFloat16* x, const BFloat16* w,
                      const float* bias, float* y, const WorkspaceFn& workspace);

}  // namespace ddp::kernels::cuda

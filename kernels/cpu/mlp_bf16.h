// mlp_bf16.h - the two GEMMs of the fused bf16 MLP (runtime/ops/mlp_bf16.h) that carry a GELU epilogue, on
// the CPU: the exact emulation of the cuBLASLt path of kernels/cuda/mlp_bf16.h (same names, same meanings).
// Each is one bf16 GEMM with float32 accumulation (gemm_bf16: exact products of bf16 values) followed by the
// per-element epilogue of kernels/cpu/mlp_bf16_epilogue.h; only the summation order differs from the GPU.
// Row-major: x (rows, in), weights as nn::Linear holds them (out_features, in_features).
#pragma once
#include <cstdint>

#include "runtime/core/dtype.h"

namespace ddp::kernels::cpu {

// pre = x w^T + bias (float32 accumulator plus the bf16 bias's float32 value; bias may be null),
// hidden = bf16(gelu(pre)) and pre kept as bf16: x (rows, in), w (out, in), bias (out), hidden and pre
// (rows, out). The bias is bf16 because cuBLASLt's bias vector has D's type (cublasLt.h,
// CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: D's type except for int8 and fp8 kernels).
void gelu_linear_bf16(int64_t rows, int64_t out, int64_t in, const BFloat16* x, const BFloat16* w,
                      const BFloat16* bias, BFloat16* hidden, BFloat16* pre);

// The backward through the next linear and the GELU: d_pre = bf16((g w) * gelu'(pre)) with g (rows, n),
// w (n, hidden) (the next linear's weight), pre and d_pre (rows, hidden); d_bias (hidden, may be null) =
// bf16(float32 column sums of d_pre) (cuBLASLt's bias gradient also has D's type; zeros for zero rows).
void dgelu_matmul_bf16(int64_t rows, int64_t hidden, int64_t n, const BFloat16* g, const BFloat16* w,
                       const BFloat16* pre, BFloat16* d_pre, BFloat16* d_bias);

}  // namespace ddp::kernels::cpu

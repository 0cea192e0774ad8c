// bf16.h - bfloat16 compute on the GPU for mixed precision (runtime/ops/mixed_precision.h): conversions,
// rounding in place, and a GEMM on bf16 operands with float32 accumulation and float32 (or rounded bf16)
// output on the tensor cores (cublasGemmEx / cublasGemmStridedBatchedEx, CUBLAS_COMPUTE_32F). Same names and
// meanings as kernels/cpu/bf16.h; everything runs on ddp::cuda::current_stream().
#pragma once
#include <cstdint>

#include "runtime/core/dtype.h"

namespace ddp::kernels::cuda {

void to_bf16(const float* x, BFloat16* y, int64_t n);
void from_bf16(const BFloat16* x, float* y, int64_t n);
void round_to_bf16(float* x, int64_t n);

void gemm_bf16(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
               const BFloat16* A, int64_t stride_a, const BFloat16* B, int64_t stride_b, float beta, float* C,
               int64_t stride_c);
// C (M, N) bfloat16 = round(op(A) op(B)) (one product, alpha 1, beta 0): cuBLAS rounds its float32
// accumulator to bf16 on the way out (no float32 C in memory, no rounding pass).
void gemm_bf16_to_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const BFloat16* A,
                       const BFloat16* B, BFloat16* C);

}  // namespace ddp::kernels::cuda

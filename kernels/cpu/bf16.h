// bf16.h - bfloat16 compute on the CPU, emulated for mixed precision (runtime/ops/mixed_precision.h): exact
// conversions, rounding in place (round to nearest even, as the GPU's __float2bfloat16), and a GEMM on
// bfloat16 operands with float32 accumulation and output. The CUDA kernels of the same names
// (kernels/cuda/bf16.h) run the GEMM on bf16 tensor cores through cuBLAS.
#pragma once
#include <cstdint>

#include "runtime/core/dtype.h"

namespace ddp::kernels::cpu {

void to_bf16(const float* x, BFloat16* y, int64_t n);    // rounds
void from_bf16(const BFloat16* x, float* y, int64_t n);  // exact
void round_to_bf16(float* x, int64_t n);                 // x = float(bf16(x)), in place

// C (M, N) float32 = alpha * op(A) op(B) + beta * C for `batch` products (element strides, 0 = shared),
// A and B bfloat16 (stored as in kernels/cpu/gemm.h). The bf16 values convert exactly to float32 and one
// float32 GEMM multiplies them: float32 products and accumulation, the emulation of a bf16 tensor-core GEMM
// up to the summation order.
void gemm_bf16(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
               const BFloat16* A, int64_t stride_a, const BFloat16* B, int64_t stride_b, float beta, float* C,
               int64_t stride_c);

// C (M, N) bfloat16 = round(op(A) op(B)): the float32 product of gemm_bf16 (alpha 1, beta 0, one product)
// rounded once to nearest even - the values gemm_bf16 + round_to_bf16 give, stored in half the bytes (the
// GPT's classifier: bf16 logits for the loss, kernels/cuda/loss.h).
void gemm_bf16_to_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const BFloat16* A,
                       const BFloat16* B, BFloat16* C);

}  // namespace ddp::kernels::cpu

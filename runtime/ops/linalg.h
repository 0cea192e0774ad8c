// linalg.h - differentiable matrix products: matmul (plain and batched) and the linear layer's affine map.
// Both run as BLAS/cuBLAS GEMMs with transpose flags; nothing is transposed in memory, and the linear layer's
// bias add happens inside its GEMM (the output starts as the broadcast bias, then beta = 1).
#pragma once
#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// a: (M, K), b: (K, N) -> (M, N)
// a: (..., M, K), b: (..., K, N) with equal batch dimensions -> (..., M, N)
// a: (..., M, K), b: (K, N) shared by every batch entry -> (..., M, N) (one GEMM over all leading dims)
Tensor matmul(const Tensor& a, const Tensor& b);

// x: (..., in), weight: (out, in) (PyTorch layout), bias: (out) or undefined ->
// (..., out) = x weight^T + bias. A bfloat16 x (a bf16 op's output under bf16 compute,
// runtime/ops/mixed_precision.h) takes the bf16 path with a float32 weight, whatever the mode, and gets a
// bfloat16 gradient.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ops::linear whose output, under bf16 compute (runtime/ops/mixed_precision.h) on a float32 x with in > 0, is
// a bfloat16 tensor holding the values ops::linear's float32 output would (the product rounded once): the
// GPT's classifier, whose (B, T, vocab) logits then cost half the memory and no rounding pass, and whose
// loss (ops::cross_entropy takes bf16 logits) hands back a bf16 gradient the backward GEMMs use as it is.
// Gradients of x, weight and bias are float32 and bitwise those of ops::linear under bf16 compute. Outside
// bf16 compute (float32 or float64 x, or in = 0) it is ops::linear.
Tensor linear_bf16_output(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace ddp::ops

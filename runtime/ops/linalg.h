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
// (..., out) = x weight^T + bias
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace ddp::ops

// mlp_bf16_plan.h - when the fused bf16 MLP's GELU GEMMs (kernels/cuda/mlp_bf16.h) run as one cuBLASLt call
// with a GELU epilogue and when they fall back to a bf16 GEMM plus a separate epilogue kernel. Host-only (no
// CUDA headers), so tests/ops_nn/test_mlp_bf16.cpp checks the same decision on the CPU.
//
// cuBLASLt (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD / _POINTER / _BIAS_POINTER) asks the GELU aux
// matrix's leading dimension to be a multiple of 8 and derives the expected alignment of the bias and aux
// pointers from their values; we ask 16 bytes of every pointer and a multiple of 8 elements (16 bytes of
// bf16) of every leading dimension, so the tensor-core epilogue kernels apply. Anything else, and zero rows,
// takes the fallback, which computes the same per-element epilogue (mlp_bf16_epilogue.h).
#pragma once
#include <cstdint>
#include <initializer_list>

namespace ddp::kernels::cuda {

constexpr int64_t kLtLeadingDimMultiple = 8;   // elements
constexpr uintptr_t kLtPointerAlignment = 16;  // bytes

inline bool lt_leading_dims_fit(std::initializer_list<int64_t> lds) {
  for (int64_t ld : lds)
    if (ld <= 0 || ld % kLtLeadingDimMultiple != 0) return false;
  return true;
}
// Null pointers (an absent bias or bias gradient) fit.
inline bool lt_pointers_fit(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % kLtPointerAlignment != 0) return false;
  return true;
}

// gelu_linear_bf16: x (rows, in), w (out, in), bias (out), hidden and pre (rows, out).
inline bool gelu_linear_fuses(int64_t rows, int64_t out, int64_t in, const void* x, const void* w,
                              const void* bias, const void* hidden, const void* pre) {
  return rows > 0 && lt_leading_dims_fit({in, out}) && lt_pointers_fit({x, w, bias, hidden, pre});
}
// dgelu_matmul_bf16: g (rows, n), w (n, hidden), pre and d_pre (rows, hidden), d_bias (hidden).
inline bool dgelu_matmul_fuses(int64_t rows, int64_t hidden, int64_t n, const void* g, const void* w,
                               const void* pre, const void* d_pre, const void* d_bias) {
  return rows > 0 && lt_leading_dims_fit({n, hidden}) && lt_pointers_fit({g, w, pre, d_pre, d_bias});
}

}  // namespace ddp::kernels::cuda

// gemm.h - row-major matrix products on the GPU through cuBLAS (same names and argument meanings as
// kernels/cpu/gemm.h), on ddp::cuda::current_stream() with the thread's cuBLAS handle.
//
// cuBLAS is column-major: a row-major (M, N) matrix is the column-major (N, M) matrix with the same memory,
// so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T by swapping the operands (and M with N).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace ddp::kernels::cuda {

// C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C; A stored (M, K) or (K, M) when trans_a,
// B stored (K, N) or (N, K) when trans_b. float and double.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, const T* B,
          T beta, T* C);
// `batch` products with element strides between matrices (0 reuses one matrix), one strided-batched call.
template <class T>
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, T alpha,
                  const T* A, int64_t stride_a, const T* B, int64_t stride_b, T beta, T* C, int64_t stride_c);
// out (rows, n): every row = bias (n).
template <class T>
void fill_rows(const T* bias, int64_t rows, int64_t n, T* out);

}  // namespace ddp::kernels::cuda

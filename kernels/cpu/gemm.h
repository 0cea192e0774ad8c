// gemm.h - row-major matrix products on the CPU through OpenBLAS, plus the two small helpers a linear layer
// needs around them (broadcasting a bias into every output row, summing rows for the bias gradient).
//
// All matrices are row-major and contiguous. "trans_a" means A is stored as (K, M) and used as its transpose,
// so no transpose is ever materialised: the flag goes straight to cblas.
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {

// C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C.
// A is stored (M, K), or (K, M) when trans_a; B is stored (K, N), or (N, K) when trans_b.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, const T* B,
          T beta, T* C);

// `batch` independent products; matrix i of A/B/C starts at i * stride_a / stride_b / stride_c elements
// (a stride of 0 reuses the same matrix for every batch entry).
template <class T>
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, T alpha,
                  const T* A, int64_t stride_a, const T* B, int64_t stride_b, T beta, T* C, int64_t stride_c);

// out (rows, n): every row = bias (n).
template <class T>
void fill_rows(const T* bias, int64_t rows, int64_t n, T* out);

// OpenBLAS worker threads for every later GEMM in this process (n >= 1), and the current count.
void set_blas_threads(int n);
int blas_threads();

}  // namespace ddp::kernels::cpu

// gemm.h - row-major matrix products on the CPU through OpenBLAS or oneDNN (float32: the library
// kernels/cpu/gemm_backend.h picks per shape and thread budget; float64: OpenBLAS), plus the small helpers a
// linear layer needs around them (broadcasting a bias into every output row) and the thread budget of both.
//
// All matrices are row-major. "trans_a" means A is stored as (K, M) and used as its transpose, so no transpose
// is ever materialised: the flag goes straight to the library.
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {

// C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C.
// A is stored (M, K), or (K, M) when trans_a; B is stored (K, N), or (N, K) when trans_b.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, const T* B,
          T beta, T* C);

// The same with explicit leading dimensions (the stored row length of each matrix, >= its used row length), for
// blocks inside larger matrices.
template <class T>
void gemm_ld(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
             const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// The same product always on OpenBLAS, whatever the rule or DDP_GEMM say, for callers whose results are tied
// to it (conv.cpp's per-image products, the bf16 attention emulation); counted in gemm_counts() and parking
// the intra-op pool's polling workers before a threaded call, as gemm_ld does. No checks or special cases
// beyond the library's own.
template <class T>
void gemm_ld_openblas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                      int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// `batch` independent products; matrix i of A/B/C starts at i * stride_a / stride_b / stride_c elements
// (a stride of 0 reuses the same matrix for every batch entry).
template <class T>
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, T alpha,
                  const T* A, int64_t stride_a, const T* B, int64_t stride_b, T beta, T* C, int64_t stride_c);

// out (rows, n): every row = bias (n).
template <class T>
void fill_rows(const T* bias, int64_t rows, int64_t n, T* out);

// The GEMM thread budget of this process (n >= 1): OpenBLAS's worker threads, and the OpenMP threads of every
// later oneDNN product (set per calling thread before each product); the current budget (OpenBLAS's count,
// which follows OPENBLAS_NUM_THREADS / OMP_NUM_THREADS until set).
void set_blas_threads(int n);
int blas_threads();

}  // namespace ddp::kernels::cpu

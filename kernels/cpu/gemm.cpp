// gemm.cpp - the cblas calls behind gemm/gemm_batched (float -> sgemm, double -> dgemm) and the bias helpers.
#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <climits>
#include <cstring>

#include "runtime/core/error.h"

namespace ddp::kernels::cpu {
namespace {
blasint as_blas_int(int64_t v, const char* what) {
  DDP_CHECK(v >= 0 && v <= INT_MAX, "gemm: ", what, " = ", v, " does not fit the 32-bit BLAS interface");
  return static_cast<blasint>(v);
}

template <class T>
void call_blas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, const T* B,
               T beta, T* C) {
  const blasint m = as_blas_int(M, "M"), n = as_blas_int(N, "N"), k = as_blas_int(K, "K");
  // Leading dimensions are the stored row lengths of the row-major matrices.
  const blasint lda = trans_a ? m : k, ldb = trans_b ? k : n, ldc = n;
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (sizeof(T) == sizeof(float)) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, A, lda > 0 ? lda : 1, B, ldb > 0 ? ldb : 1, beta, C,
                ldc > 0 ? ldc : 1);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, A, lda > 0 ? lda : 1, B, ldb > 0 ? ldb : 1, beta, C,
                ldc > 0 ? ldc : 1);
  }
}
}  // namespace

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, const T* B,
          T beta, T* C) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: C = beta * C (BLAS may not touch C at all here)
    for (int64_t i = 0; i < M * N; ++i) C[i] = beta == T(0) ? T(0) : beta * C[i];
    return;
  }
  call_blas(trans_a, trans_b, M, N, K, alpha, A, B, beta, C);
}

template <class T>
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, T alpha,
                  const T* A, int64_t stride_a, const T* B, int64_t stride_b, T beta, T* C,
                  int64_t stride_c) {
  for (int64_t i = 0; i < batch; ++i)
    gemm(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, B + i * stride_b, beta, C + i * stride_c);
}

template <class T>
void fill_rows(const T* bias, int64_t rows, int64_t n, T* out) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(out + r * n, bias, static_cast<size_t>(n) * sizeof(T));
}

void set_blas_threads(int n) {
  DDP_CHECK(n >= 1, "set_blas_threads: ", n, " threads requested; give at least 1");
  openblas_set_num_threads(n);
}
int blas_threads() { return openblas_get_num_threads(); }

#define DDP_INSTANTIATE_GEMM(T)                                                                       \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, const T*, T, T*);         \
  template void gemm_batched<T>(bool, bool, int64_t, int64_t, int64_t, int64_t, T, const T*, int64_t, \
                                const T*, int64_t, T, T*, int64_t);                                   \
  template void fill_rows<T>(const T*, int64_t, int64_t, T*);
DDP_INSTANTIATE_GEMM(float)
DDP_INSTANTIATE_GEMM(double)
#undef DDP_INSTANTIATE_GEMM

}  // namespace ddp::kernels::cpu

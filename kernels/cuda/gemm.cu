// gemm.cu - cuBLAS calls behind the row-major gemm wrappers (operand swap, see gemm.h; float32 with or without
// TF32 tensor cores as core/float32_math.h says) and the bias fill kernel.
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm.h"
#include "runtime/core/cuda/handles.h"
#include "runtime/core/float32_math.h"
#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
int as_int(int64_t v, const char* what) {
  DDP_CHECK(v >= 0 && v <= INT_MAX, "cuda gemm: ", what, " = ", v, " does not fit cuBLAS's 32-bit sizes");
  return static_cast<int>(v);
}

template <class T>
__global__ void fill_rows_kernel(const T* bias, int64_t rows, int64_t n, T* out) {
  DDP_CUDA_KERNEL_LOOP(i, rows * n) { out[i] = bias[i % n]; }
}

template <class T>
__global__ void scale_kernel(T* c, T beta, int64_t n) {
  DDP_CUDA_KERNEL_LOOP(i, n) { c[i] = beta == T(0) ? T(0) : beta * c[i]; }
}
}  // namespace

template <class T>
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, T alpha,
                  const T* A, int64_t stride_a, const T* B, int64_t stride_b, T beta, T* C,
                  int64_t stride_c) {
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) {  // an empty sum: C = beta * C, for every batch entry (stride_c >= M * N when batch > 1)
    const int64_t n = (batch - 1) * stride_c + M * N;
    scale_kernel<<<grid_for(n), kBlock, 0, ddp::cuda::current_stream()>>>(C, beta, n);
    DDP_CUDA_CHECK_LAUNCH();
    return;
  }
  const int m = as_int(M, "M"), n = as_int(N, "N"), k = as_int(K, "K"), b = as_int(batch, "batch");
  const int lda = trans_a ? m : k, ldb = trans_b ? k : n, ldc = n;  // stored row lengths
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasHandle_t h = ddp::cuda::cublas_handle();
  // Column-major view: C^T (N, M) = op(B)^T (N, K) * op(A)^T (K, M).
  if constexpr (sizeof(T) == sizeof(float)) {
    // float32: IEEE FMAs, or TF32 tensor cores when the matmul precision allows them (core/float32_math.h).
    const cublasComputeType_t compute =
        float32_gemm_may_use_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    if (batch == 1) {
      DDP_CUBLAS_CHECK(cublasGemmEx(h, tb, ta, n, m, k, &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C,
                                    CUDA_R_32F, ldc, compute, CUBLAS_GEMM_DEFAULT));
    } else {
      DDP_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, tb, ta, n, m, k, &alpha, B, CUDA_R_32F, ldb, stride_b, A,
                                                  CUDA_R_32F, lda, stride_a, &beta, C, CUDA_R_32F, ldc, stride_c,
                                                  b, compute, CUBLAS_GEMM_DEFAULT));
    }
  } else {
    if (batch == 1) {
      DDP_CUBLAS_CHECK(cublasDgemm(h, tb, ta, n, m, k, &alpha, B, ldb, A, lda, &beta, C, ldc));
    } else {
      DDP_CUBLAS_CHECK(cublasDgemmStridedBatched(h, tb, ta, n, m, k, &alpha, B, ldb, stride_b, A, lda,
                                                 stride_a, &beta, C, ldc, stride_c, b));
    }
  }
}

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, const T* B,
          T beta, T* C) {
  gemm_batched(trans_a, trans_b, 1, M, N, K, alpha, A, 0, B, 0, beta, C, 0);
}

template <class T>
void fill_rows(const T* bias, int64_t rows, int64_t n, T* out) {
  if (rows * n == 0) return;
  fill_rows_kernel<<<grid_for(rows * n), kBlock, 0, ddp::cuda::current_stream()>>>(bias, rows, n, out);
  DDP_CUDA_CHECK_LAUNCH();
}

#define DDP_INSTANTIATE_CUDA_GEMM(T)                                                                  \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, const T*, T, T*);         \
  template void gemm_batched<T>(bool, bool, int64_t, int64_t, int64_t, int64_t, T, const T*, int64_t, \
                                const T*, int64_t, T, T*, int64_t);                                   \
  template void fill_rows<T>(const T*, int64_t, int64_t, T*);
DDP_INSTANTIATE_CUDA_GEMM(float)
DDP_INSTANTIATE_CUDA_GEMM(double)
#undef DDP_INSTANTIATE_CUDA_GEMM

}  // namespace ddp::kernels::cuda

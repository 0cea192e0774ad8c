// bf16.cu - GPU bfloat16 conversion kernels (16 bytes per float32 access where the pointers allow,
// vector_access.cuh) and the bf16 tensor-core GEMM through cuBLAS (float32 accumulation and output).
// Row-major wrappers as in gemm.cu: C^T = op(B)^T op(A)^T in cuBLAS's column-major view.
#include <cuda_bf16.h>

#include <climits>

#include "kernels/cuda/bf16.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/vector_access.cuh"
#include "runtime/core/cuda/handles.h"
#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
static_assert(sizeof(BFloat16) == sizeof(__nv_bfloat16), "BFloat16 and __nv_bfloat16 must share a layout");

struct ToBf16 {
  __device__ __nv_bfloat16 operator()(float x) const { return __float2bfloat16(x); }  // round to nearest even
};
struct FromBf16 {
  __device__ float operator()(__nv_bfloat16 x) const { return __bfloat162float(x); }
};
struct RoundToBf16 {
  __device__ float operator()(float x) const { return __bfloat162float(__float2bfloat16(x)); }
};
int as_int(int64_t v, const char* what) {
  DDP_CHECK(v >= 0 && v <= INT_MAX, "cuda bf16 gemm: ", what, " = ", v,
            " does not fit cuBLAS's 32-bit sizes");
  return static_cast<int>(v);
}
}  // namespace

void to_bf16(const float* x, BFloat16* y, int64_t n) {
  map_elements(n, ddp::cuda::current_stream(), ToBf16{}, reinterpret_cast<__nv_bfloat16*>(y), x);
}

void from_bf16(const BFloat16* x, float* y, int64_t n) {
  map_elements(n, ddp::cuda::current_stream(), FromBf16{}, y, reinterpret_cast<const __nv_bfloat16*>(x));
}

void round_to_bf16(float* x, int64_t n) {
  map_elements(n, ddp::cuda::current_stream(), RoundToBf16{}, x, static_cast<const float*>(x));
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
               const BFloat16* A, int64_t stride_a, const BFloat16* B, int64_t stride_b, float beta, float* C,
               int64_t stride_c) {
  if (M == 0 || N == 0 || batch == 0) return;
  DDP_CHECK(K > 0, "cuda bf16 gemm: K = 0 (an empty sum) is not supported; the callers never pass it");
  const int m = as_int(M, "M"), n = as_int(N, "N"), k = as_int(K, "K"), b = as_int(batch, "batch");
  const int lda = trans_a ? m : k, ldb = trans_b ? k : n, ldc = n;
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasHandle_t h = ddp::cuda::cublas_handle();
  if (batch == 1) {
    DDP_CUBLAS_CHECK(cublasGemmEx(h, tb, ta, n, m, k, &alpha, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda, &beta,
                                  C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    DDP_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, tb, ta, n, m, k, &alpha, B, CUDA_R_16BF, ldb, stride_b, A,
                                                CUDA_R_16BF, lda, stride_a, &beta, C, CUDA_R_32F, ldc,
                                                stride_c, b, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

void gemm_bf16_to_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const BFloat16* A,
                       const BFloat16* B, BFloat16* C) {
  if (M == 0 || N == 0) return;
  DDP_CHECK(K > 0, "cuda bf16 gemm: K = 0 (an empty sum) is not supported; the callers never pass it");
  const int m = as_int(M, "M"), n = as_int(N, "N"), k = as_int(K, "K");
  const int lda = trans_a ? m : k, ldb = trans_b ? k : n, ldc = n;
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const float alpha = 1.f, beta = 0.f;
  DDP_CUBLAS_CHECK(cublasGemmEx(ddp::cuda::cublas_handle(), tb, ta, n, m, k, &alpha, B, CUDA_R_16BF, ldb, A,
                                CUDA_R_16BF, lda, &beta, C, CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
}

}  // namespace ddp::kernels::cuda

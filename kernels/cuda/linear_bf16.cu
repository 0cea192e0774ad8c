// linear_bf16.cu - the bf16 linear's GEMM with its bias on the GPU (linear_bf16.h): one cuBLASLt matmul with
// CUBLASLT_EPILOGUE_BIAS (bf16 A and B, float32 C, D and bias, float32 accumulation), in place of a kernel
// that broadcasts the bias into y and a cuBLAS GEMM with beta = 1 that reads it back. On the H200 the
// broadcast cost 28-74 us per linear of GPT-2 small (36 a step, 1.6 ms; ncu, 2026-12-04), and the GEMM read y
// once more.
//
// Row-major to cuBLASLt's column-major as in mlp_bf16.cu: y (rows, out) = x (rows, in) w^T is column-major
// y^T (out, rows) = op_T(w: in x out, ld in) op_N(x^T: in x rows, ld in); the bias runs along D's
// column-major rows (out). A shape with no algorithm is said once on stderr and left to the caller's
// fallback.
#include <atomic>
#include <cstdio>

#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/linear_bf16.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
bool linear_bias_bf16(int64_t rows, int64_t out, int64_t in, const BFloat16* x, const BFloat16* w,
                      const float* bias, float* y, const WorkspaceFn& workspace) {
  if (rows == 0 || out == 0) return true;
  DDP_CHECK(in > 0,
            "cuda linear_bias_bf16: in = 0 (an empty sum) is not supported; the callers never pass it");
  LtMatmulDesc desc;
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_32F);
  LtLayout a(CUDA_R_16BF, in, out, in), b(CUDA_R_16BF, in, rows, in), d(CUDA_R_32F, out, rows, out);
  const cublasStatus_t st = lt_matmul_if_supported(desc, w, a, x, b, y, d, workspace);
  if (st != CUBLAS_STATUS_SUCCESS) {
    static std::atomic<bool> told{false};
    if (!told.exchange(true))
      std::fprintf(
          stderr,
          "ddp: cuBLASLt has no algorithm for CUBLASLT_EPILOGUE_BIAS with bf16 A/B, float32 D and bias: "
          "rows = %lld, out = %lld, in = %lld (%s); the bf16 linear broadcasts its bias and runs a GEMM "
          "with beta = 1 there\n",
          static_cast<long long>(rows), static_cast<long long>(out), static_cast<long long>(in),
          cublasLtGetStatusString(st));
    return false;
  }
  return true;
}

}  // namespace ddp::kernels::cuda

// mlp_bf16.cu - the fused bf16 MLP's GELU GEMMs on the GPU: one cuBLASLt matmul with a GELU epilogue where
// mlp_bf16_plan.h allows, else a cuBLAS bf16 GEMM into float32 plus an epilogue kernel that runs the shared
// per-element functions (kernels/cpu/mlp_bf16_epilogue.h).
//
// Row-major to cuBLASLt's column-major as in bf16.cu: a row-major (r, c) matrix is a column-major (c, r) one,
// so row-major D = A B^T is column-major D^T = B A^T. The fc GEMM pre (rows, out) = x (rows, in) w^T is
// column-major pre^T (out, rows) = op_T(w: in x out, ld in) op_N(x^T: in x rows, ld in); the bias runs along
// D's column-major rows (out), as cuBLASLt's bias does. The backward dh (rows, hidden) = g (rows, n)
// w (n, hidden) is column-major dh^T (hidden, rows) = op_N(w^T: hidden x n, ld hidden) op_N(g^T: n x rows,
// ld n), and the bias gradient (length = D's rows, hidden) sums d_pre over the rows of the batch (our column
// sums: cuBLASLt's DGELU_BGRAD reduction was slow, see dgelu_matmul_bf16).
//
// Types: A, B, D, the aux matrix, the bias and the bias gradient bf16 (cublasLt.h: the aux matrix, the bias
// vector and the bias gradient have D's / C's type except for int8 and fp8 kernels, so
// CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE and _BIAS_DATA_TYPE stay at their defaults); compute and scale
// float32 (CUBLAS_COMPUTE_32F). Workspace: 32 MiB per call from the caller's WorkspaceFn (the ops': the
// caching allocator, so after the first call no device memory is allocated), the heuristic told that size.
// The cuBLASLt handle is the thread's cuBLAS handle (cuBLAS's docs: a cublasHandle_t encapsulates a cuBLASLt
// handle and may be cast to one; PyTorch does the same). Every cuBLASLt call returns a cublasStatus_t and is
// checked with DDP_CUBLAS_CHECK (file:line, the call and the status name); a heuristic that finds no
// algorithm sends that call to the unfused kernels and says so once on stderr (epilogue and shape).
#include <cublasLt.h>

#include <atomic>
#include <cstdio>

#include "kernels/cpu/mlp_bf16_epilogue.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/mlp_bf16.h"
#include "kernels/cuda/mlp_bf16_plan.h"
#include "kernels/cuda/reduce.h"
#include "runtime/core/cuda/handles.h"
#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
std::atomic<int64_t> fused_calls{0}, fallback_calls{0};

const char* epilogue_name(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      return "CUBLASLT_EPILOGUE_GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX:
      return "CUBLASLT_EPILOGUE_GELU_AUX";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
      return "CUBLASLT_EPILOGUE_DGELU_BGRAD";
    case CUBLASLT_EPILOGUE_DGELU:
      return "CUBLASLT_EPILOGUE_DGELU";
    default:
      return "(another epilogue)";
  }
}

// D (m, n) = op(A) op(B) with `epilogue` (everything column-major bf16; C = D with beta = 0); aux: the bf16
// GELU input matrix (m, n), ld m; bias: bf16 of length m (forward: added; backward: the gradient). False when
// cuBLASLt has no algorithm for it: the caller takes the unfused kernels, and the first such case is printed
// once to stderr (the path counters show it too).
bool lt_gelu_matmul(cublasLtEpilogue_t epilogue, bool trans_a, int64_t m, int64_t n, int64_t k, const void* A,
                    int64_t lda, const void* B, int64_t ldb, void* D, void* aux, void* bias,
                    const WorkspaceFn& workspace) {
  LtMatmulDesc desc;
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, ta);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, tb);
  desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, m);
  if (bias) {
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  }
  LtLayout a(CUDA_R_16BF, trans_a ? k : m, trans_a ? m : k, lda), b(CUDA_R_16BF, k, n, ldb),
      d(CUDA_R_16BF, m, n, m);
  const cublasStatus_t st = lt_matmul_if_supported(desc, A, a, B, b, D, d, workspace);
  if (st != CUBLAS_STATUS_SUCCESS) {
    static std::atomic<bool> told{false};
    if (!told.exchange(true))
      std::fprintf(stderr,
                   "ddp: cuBLASLt has no algorithm for %s with bf16 A/B/D/aux, float32 compute%s: m = %lld, "
                   "n = %lld, k = %lld, lda = %lld, ldb = %lld (%s); the fused MLP takes its unfused kernels "
                   "there (kernels/cuda/mlp_bf16_plan.h could send such shapes there directly)\n",
                   epilogue_name(epilogue), bias ? " and a bf16 bias" : "", static_cast<long long>(m),
                   static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(lda),
                   static_cast<long long>(ldb), cublasLtGetStatusString(st));
    return false;
  }
  fused_calls.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// ---- the fallback's epilogue kernels: the same per-element functions as the CPU ----
__global__ void gelu_bias_kernel(const float* acc, const BFloat16* bias, int64_t out, BFloat16* hidden,
                                 BFloat16* pre, int64_t n) {
  DDP_CUDA_KERNEL_LOOP(i, n) {
    const cpu::GeluBiasBf16 e =
        cpu::gelu_bias_epilogue(acc[i], bias ? cpu::bf16_bits_to_float(bias[i % out].bits) : 0.f);
    hidden[i].bits = e.hidden;
    pre[i].bits = e.pre;
  }
}
// d_pre = dgelu epilogue; acc becomes the rounded d_pre in float32 (what the bias gradient sums).
__global__ void dgelu_kernel(float* acc, const BFloat16* pre, BFloat16* d_pre, int64_t n) {
  DDP_CUDA_KERNEL_LOOP(i, n) {
    const uint16_t bits = cpu::dgelu_epilogue(acc[i], pre[i].bits);
    d_pre[i].bits = bits;
    acc[i] = cpu::bf16_bits_to_float(bits);
  }
}
}  // namespace

void gelu_linear_bf16(int64_t rows, int64_t out, int64_t in, const BFloat16* x, const BFloat16* w,
                      const BFloat16* bias, BFloat16* hidden, BFloat16* pre, const WorkspaceFn& workspace) {
  if (rows == 0 || out == 0) return;
  DDP_CHECK(in > 0,
            "cuda gelu_linear_bf16: in = 0 (an empty sum) is not supported; ops::mlp_bf16 refuses it");
  if (gelu_linear_fuses(rows, out, in, x, w, bias, hidden, pre) &&
      lt_gelu_matmul(bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, true, out, rows, in,
                     w, in, x, in, hidden, pre, const_cast<BFloat16*>(bias), workspace))
    return;
  const int64_t n = rows * out;
  float* pacc = static_cast<float*>(workspace(static_cast<size_t>(n) * sizeof(float)));
  gemm_bf16(false, true, 1, rows, out, in, 1.f, x, 0, w, 0, 0.f, pacc, 0);
  gelu_bias_kernel<<<grid_for(n), kBlock, 0, ddp::cuda::current_stream()>>>(pacc, bias, out, hidden, pre, n);
  DDP_CUDA_CHECK_LAUNCH();
  fallback_calls.fetch_add(1, std::memory_order_relaxed);
}

void dgelu_matmul_bf16(int64_t rows, int64_t hidden, int64_t n, const BFloat16* g, const BFloat16* w,
                       const BFloat16* pre, BFloat16* d_pre, BFloat16* d_bias, const WorkspaceFn& workspace) {
  if (hidden == 0) return;
  if (rows == 0) {
    if (d_bias)
      DDP_CUDA_CHECK(cudaMemsetAsync(d_bias, 0, static_cast<size_t>(hidden) * sizeof(BFloat16),
                                     ddp::cuda::current_stream()));
    return;
  }
  DDP_CHECK(n > 0, "cuda dgelu_matmul_bf16: n = 0 (an empty sum) is not supported; ops::mlp_bf16 refuses it");
  // cuBLASLt's DGELU epilogue, then our column sums of d_pre for the bias gradient: DGELU_BGRAD's own
  // reduction ran as a separate cuBLASLt kernel of 160-165 us per call on the H200 (8192 x 3072; ncu,
  // 2026-12-04) where ours takes tens of us; ours sums exactly what the fallback below sums (the bf16 d_pre
  // values, in double, rounded to float32 then bf16), so both paths give the same bias gradient.
  if (dgelu_matmul_fuses(rows, hidden, n, g, w, pre, d_pre, d_bias) &&
      lt_gelu_matmul(CUBLASLT_EPILOGUE_DGELU, false, hidden, rows, n, w, hidden, g, n, d_pre,
                     const_cast<BFloat16*>(pre), nullptr, workspace)) {
    if (d_bias) {
      float* sums = static_cast<float*>(workspace(static_cast<size_t>(hidden) * sizeof(float)));
      sum_middle<BFloat16, float>(d_pre, 1, rows, hidden, sums, 1.0);
      to_bf16(sums, d_bias, hidden);
    }
    return;
  }
  const int64_t count = rows * hidden;
  float* pacc = static_cast<float*>(workspace(static_cast<size_t>(count) * sizeof(float)));
  gemm_bf16(false, false, 1, rows, hidden, n, 1.f, g, 0, w, 0, 0.f, pacc, 0);
  dgelu_kernel<<<grid_for(count), kBlock, 0, ddp::cuda::current_stream()>>>(pacc, pre, d_pre, count);
  DDP_CUDA_CHECK_LAUNCH();
  if (d_bias) {  // float32 column sums, then rounded
    float* sums = static_cast<float*>(workspace(static_cast<size_t>(hidden) * sizeof(float)));
    sum_middle<float, float>(pacc, 1, rows, hidden, sums, 1.0);
    to_bf16(sums, d_bias, hidden);
  }
  fallback_calls.fetch_add(1, std::memory_order_relaxed);
}

MlpBf16PathCounts mlp_bf16_path_counts() {
  return {fused_calls.load(std::memory_order_relaxed), fallback_calls.load(std::memory_order_relaxed)};
}

}  // namespace ddp::kernels::cuda

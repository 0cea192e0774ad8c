// cublaslt.h - RAII holders of cuBLASLt's descriptors for the matmuls with epilogues (the fused MLP's GELU
// GEMMs, mlp_bf16.cu; the bf16 linear's bias epilogue, linear_bf16.cu), created and destroyed around each
// call (creating them costs microseconds), and the thread's cuBLASLt handle. Every call is checked with
// DDP_CUBLAS_CHECK (file:line, the call and the status name).
#pragma once
#include <cublasLt.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/workspace.h"
#include "runtime/core/cuda/handles.h"
#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {

// float32 compute and scale type (alpha, beta float).
struct LtMatmulDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  LtMatmulDesc() { DDP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)); }
  ~LtMatmulDesc() { cublasLtMatmulDescDestroy(desc); }
  LtMatmulDesc(const LtMatmulDesc&) = delete;
  LtMatmulDesc& operator=(const LtMatmulDesc&) = delete;
  template <class T>
  void set(cublasLtMatmulDescAttributes_t attr, const T& value) {
    DDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
  }
};
// A column-major matrix of `type` (CUDA_R_16BF, CUDA_R_32F), `rows` x `cols`, leading dimension ld
// (elements).
struct LtLayout {
  cublasLtMatrixLayout_t layout = nullptr;
  LtLayout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
    DDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows),
                                                static_cast<uint64_t>(cols), ld));
  }
  ~LtLayout() { cublasLtMatrixLayoutDestroy(layout); }
  LtLayout(const LtLayout&) = delete;
  LtLayout& operator=(const LtLayout&) = delete;
};
struct LtPreference {
  cublasLtMatmulPreference_t pref = nullptr;
  explicit LtPreference(size_t workspace_bytes) {
    DDP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t bytes = workspace_bytes;
    DDP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &bytes, sizeof(bytes)));
  }
  ~LtPreference() { cublasLtMatmulPreferenceDestroy(pref); }
  LtPreference(const LtPreference&) = delete;
  LtPreference& operator=(const LtPreference&) = delete;
};

// The thread's cuBLASLt handle: its cuBLAS handle (cuBLAS's docs: a cublasHandle_t encapsulates a cuBLASLt
// handle and may be cast to one).
inline cublasLtHandle_t lt_handle() { return reinterpret_cast<cublasLtHandle_t>(ddp::cuda::cublas_handle()); }

// The workspace each epilogue matmul asks for (and tells the heuristic), from the caller's WorkspaceFn.
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

// D = alpha A B (+ desc's epilogue; C = D, beta 0) on the current stream, with the heuristic's first
// algorithm for these layouts. Returns CUBLAS_STATUS_SUCCESS once enqueued, or, with nothing enqueued, the
// reason cuBLASLt has no algorithm (CUBLAS_STATUS_NOT_SUPPORTED, also when the heuristic finds none): the
// caller then takes its fallback. Any other error is raised (DDP_CUBLAS_CHECK).
inline cublasStatus_t lt_matmul_if_supported(const LtMatmulDesc& desc, const void* A, const LtLayout& a,
                                             const void* B, const LtLayout& b, void* D, const LtLayout& d,
                                             const WorkspaceFn& workspace) {
  LtPreference pref(kLtWorkspaceBytes);
  cublasLtMatmulHeuristicResult_t algo{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_handle(), desc.desc, a.layout, b.layout,
                                                           d.layout, d.layout, pref.pref, 1, &algo, &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  DDP_CUBLAS_CHECK(st);
  void* ws = workspace(kLtWorkspaceBytes);
  const float alpha = 1.f, beta = 0.f;
  DDP_CUBLAS_CHECK(cublasLtMatmul(lt_handle(), desc.desc, &alpha, A, a.layout, B, b.layout, &beta, D,
                                  d.layout, D, d.layout, &algo.algo, ws, kLtWorkspaceBytes,
                                  ddp::cuda::current_stream()));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace ddp::kernels::cuda

// cublaslt.h - RAII holders of cuBLASLt's descriptors for the matmuls with epilogues (the fused MLP's GELU
// GEMMs, mlp_bf16.cu; the bf16 linear's bias epilogue, linear_bf16.cu), created and destroyed around each
// call (creating them costs microseconds), and the thread's cuBLASLt handle. Every call is checked with
// DDP_CUBLAS_CHECK (file:line, the call and the status name).
#pragma once
#include <cublasLt.h>

#include <cstddef>
#include <cstdint>

#include "runtime/core/cuda/handles.h"
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

}  // namespace ddp::kernels::cuda

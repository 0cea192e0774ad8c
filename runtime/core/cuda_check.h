// cuda_check.h - check macros for every CUDA runtime, NCCL, cuBLAS and cuDNN call: on failure they throw
// ddp::Error with file:line, the call's text and the library's own error string. CUDA builds only.
#pragma once
#ifndef DDP_WITH_CUDA
#error "cuda_check.h is only for CUDA builds (DDP_WITH_CUDA)"
#endif
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include "runtime/core/error.h"

namespace ddp::detail {
inline const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "CUBLAS_STATUS_UNKNOWN";
  }
}
}  // namespace ddp::detail

#define DDP_CUDA_CHECK(call)                                                                        \
  do {                                                                                              \
    cudaError_t ddp_err_ = (call);                                                                  \
    if (ddp_err_ != cudaSuccess) [[unlikely]]                                                       \
      ::ddp::detail::fail(__FILE__, __LINE__, #call, " failed: ", cudaGetErrorName(ddp_err_), " (", \
                          cudaGetErrorString(ddp_err_), ")");                                       \
  } while (0)

// After a kernel launch: reports launch-configuration errors at the launch site.
#define DDP_CUDA_CHECK_LAUNCH() DDP_CUDA_CHECK(cudaGetLastError())

#define DDP_NCCL_CHECK(call)                                                                          \
  do {                                                                                                \
    ncclResult_t ddp_res_ = (call);                                                                   \
    if (ddp_res_ != ncclSuccess) [[unlikely]]                                                         \
      ::ddp::detail::fail(__FILE__, __LINE__, #call, " failed: ", ncclGetErrorString(ddp_res_), " (", \
                          ncclGetLastError(nullptr) ? ncclGetLastError(nullptr) : "", ")");           \
  } while (0)

#define DDP_CUBLAS_CHECK(call)                                                      \
  do {                                                                              \
    cublasStatus_t ddp_st_ = (call);                                                \
    if (ddp_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                              \
      ::ddp::detail::fail(__FILE__, __LINE__, #call,                                \
                          " failed: ", ::ddp::detail::cublas_status_name(ddp_st_)); \
  } while (0)

#define DDP_CUDNN_CHECK(call)                                                                    \
  do {                                                                                           \
    cudnnStatus_t ddp_st_ = (call);                                                              \
    if (ddp_st_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                                            \
      ::ddp::detail::fail(__FILE__, __LINE__, #call, " failed: ", cudnnGetErrorString(ddp_st_)); \
  } while (0)

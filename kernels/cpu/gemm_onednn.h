// gemm_onednn.h - float32 row-major matrix products through oneDNN's dnnl_sgemm (Debian's libdnnl-dev), the
// second CPU GEMM library beside OpenBLAS. Compiled only when CMake found oneDNN (DDP_WITH_ONEDNN); gemm.cpp
// decides which library runs each product (kernels/cpu/gemm_backend.h).
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {

// C (M, N) = alpha * op(A) op(B) + beta * C, all row-major with the given leading dimensions, on `threads`
// OpenMP threads (oneDNN's threading runtime in Debian's build; the count is set for the calling thread before
// every call, so the thread budget holds whichever thread runs the product).
void onednn_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads);

// omp_get_max_threads() of the calling thread: the threads a oneDNN product started here now would use.
int onednn_threads_now();

// "oneDNN 2.6.3 (OpenMP)" - the library's version as loaded at run time.
const char* onednn_version();

}  // namespace ddp::kernels::cpu

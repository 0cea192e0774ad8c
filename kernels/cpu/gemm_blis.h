// gemm_blis.h - float32 row-major matrix products through BLIS (Debian's libblis4, its kernels chosen for the
// CPU at run time: zen, zen2, zen3, haswell, skx, ...), the third CPU GEMM library beside OpenBLAS and oneDNN.
// Loaded with dlopen at first use rather than linked: BLIS also exports cblas_sgemm and sgemm_, which must not
// interpose on OpenBLAS's, and a machine without it still runs (BLIS is then simply not available). Only its
// own typed API (bli_sgemm) is called. gemm.cpp decides which library runs each product (gemm_backend.h).
#pragma once
#include <cstdint>
#include <string>

namespace ddp::kernels::cpu {

// True when libblis.so.4 loaded and has the functions used here (looked up once).
bool blis_available();

// C (M, N) = alpha * op(A) op(B) + beta * C, all row-major with the given leading dimensions, on the calling
// thread (BLIS runs one thread here). blis_available() must be true.
void blis_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// "BLIS 0.9.0 (zen3 kernels)", or why it is not available ("BLIS not loaded: ...").
std::string blis_version();

}  // namespace ddp::kernels::cpu

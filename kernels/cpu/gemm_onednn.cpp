// gemm_onednn.cpp - dnnl_sgemm behind kernels/cpu/gemm_onednn.h, with the OpenMP thread count of the calling
// thread kept at the rank's budget (oneDNN sizes its parallel regions by omp_get_max_threads()).
#include "kernels/cpu/gemm_onednn.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <cstdio>
#include <string>

#include "runtime/core/error.h"

namespace ddp::kernels::cpu {

void onednn_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads) {
  // OpenMP's thread count is a per-thread setting: set it in whichever thread calls, only when it differs.
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
                                      beta, C, ldc);
  DDP_CHECK(st == dnnl_success, "gemm: oneDNN dnnl_sgemm failed with status ", static_cast<int>(st), " for (",
            M, " x ", K, ") * (", K, " x ", N, ")", trans_a ? " A transposed" : "", trans_b ? " B transposed" : "",
            "; run with DDP_GEMM=openblas to use OpenBLAS instead");
}

int onednn_threads_now() { return omp_get_max_threads(); }

const char* onednn_version() {
  static const std::string text = [] {
    const dnnl_version_t* v = dnnl_version();
    char buf[64];
    std::snprintf(buf, sizeof buf, "oneDNN %d.%d.%d (%s)", v->major, v->minor, v->patch,
                  v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other threading");
    return std::string(buf);
  }();
  return text.c_str();
}

}  // namespace ddp::kernels::cpu

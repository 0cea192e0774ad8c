// gemm.cpp - the library calls behind gemm/gemm_ld/gemm_batched: float through OpenBLAS's sgemm or oneDNN's
// dnnl_sgemm (gemm_backend_for picks) or BLIS's bli_sgemm (when forced), double through OpenBLAS's dgemm; at
// a thread budget above 1, the products the 1-thread rule gives to oneDNN as blocks on the intra-op pool; the
// bias helper and the thread budget.
#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>

#include "kernels/cpu/gemm_backend.h"
#include "kernels/cpu/gemm_blis.h"
#include "kernels/cpu/parallel.h"
#include "runtime/core/error.h"

#ifdef DDP_WITH_ONEDNN
#include "kernels/cpu/gemm_onednn.h"
#endif

namespace ddp::kernels::cpu {
namespace {
blasint as_blas_int(int64_t v, const char* what) {
  DDP_CHECK(v >= 0 && v <= INT_MAX, "gemm: ", what, " = ", v, " does not fit the 32-bit BLAS interface");
  return static_cast<blasint>(v);
}

std::atomic<int64_t> openblas_calls{0}, onednn_calls{0}, blis_calls{0};

#ifdef DDP_WITH_ONEDNN
// At a thread budget above 1 (one rank with several cores), a float product that the 1-thread rule gives to
// oneDNN for its blocks runs as those blocks on the intra-op pool, each a 1-thread dnnl_sgemm, instead of one
// OpenBLAS call on all threads (the rule's multi-threaded choice: Debian's oneDNN threads with OpenMP, whose
// spinning workers ruin a loaded machine - gemm_backend.h). The blocks split the longer side of C: rows when
// M >= N (every block then reads all of B, the smaller operand there: A is M x K, B is K x N), else columns
// (every block reads all of A), or the other side when the first's blocks fall outside the rule - the mlp's
// batch of 64 rows against 1024 columns split by rows read its 4 MB weight twice and ran 3-9% slower than
// OpenBLAS. At least kPoolGemmMinBlock rows or columns a block, edges on multiples of 16. The GEMMs' thread
// count (blas_threads()) caps the blocks: `train --deterministic` sets it to 1 and keeps the pool, and a
// block's entries are not always the bits of one call on all of C (oneDNN picks its kernel by shape: 1024 x
// 1024 x 64, the mlp's weight gradient, differs in the last bits when split by rows), so that mode keeps one
// call per product. Measured in docs/benchmarks.md, "GEMM libraries" (with the pool's workers spinning
// between jobs, parallel.h: the split with workers that sleep at once gained nothing).
constexpr int64_t kPoolGemmMinBlock = 32;

bool run_as_pool_blocks(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                        const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                        int64_t ldc) {
  const int budget = std::min(thread_budget(), openblas_get_num_threads());
  if (budget <= 1 || gemm_backend() != GemmBackend::Auto) return false;
  // The most blocks (up to the budget) whose shape the rule gives to oneDNN, on the longer side first, then
  // on the other. parallel_for then makes exactly that many: side / blocks >= 32 >= blocks per thread.
  auto most_blocks = [&](bool rows) -> int64_t {
    for (int64_t b = std::min<int64_t>(budget, (rows ? M : N) / kPoolGemmMinBlock); b > 1; --b)
      if ((rows ? gemm_backend_for(M / b, N, K, 1) : gemm_backend_for(M, N / b, K, 1)) == GemmBackend::OneDNN)
        return b;
    return 0;
  };
  bool by_rows = M >= N;
  int64_t blocks = most_blocks(by_rows);
  if (blocks == 0) {
    by_rows = !by_rows;
    blocks = most_blocks(by_rows);
    if (blocks == 0) return false;
  }
  const int64_t side = by_rows ? M : N;
  parallel_for(side, 16, side / blocks, [&](int64_t b0, int64_t b1) {
    onednn_calls.fetch_add(1, std::memory_order_relaxed);
    if (by_rows)
      onednn_sgemm(trans_a, trans_b, b1 - b0, N, K, alpha, trans_a ? A + b0 : A + b0 * lda, lda, B, ldb, beta,
                   C + b0 * ldc, ldc, 1);
    else
      onednn_sgemm(trans_a, trans_b, M, b1 - b0, K, alpha, A, lda, trans_b ? B + b0 * ldb : B + b0, ldb, beta,
                   C + b0, ldc, 1);
  });
  return true;
}
#endif

// The sizes in the 32-bit BLAS interface (an error naming the one that does not fit; leading dimensions of
// at least 1, as the libraries require even for empty operands).
struct BlasSizes {
  blasint m, n, k, lda, ldb, ldc;
};
BlasSizes blas_sizes(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  return {as_blas_int(M, "M"),
          as_blas_int(N, "N"),
          as_blas_int(K, "K"),
          as_blas_int(std::max<int64_t>(lda, 1), "lda"),
          as_blas_int(std::max<int64_t>(ldb, 1), "ldb"),
          as_blas_int(std::max<int64_t>(ldc, 1), "ldc")};
}

// One OpenBLAS product, counted; with more than one OpenBLAS thread the pool's polling workers are parked
// first, so the library's own threads get the cores (parallel.h).
template <class T>
void call_openblas(bool trans_a, bool trans_b, const BlasSizes& z, T alpha, const T* A, const T* B, T beta,
                   T* C) {
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  if (openblas_get_num_threads() > 1) park_pool_workers();
  openblas_calls.fetch_add(1, std::memory_order_relaxed);
  if constexpr (sizeof(T) == sizeof(float))
    cblas_sgemm(CblasRowMajor, ta, tb, z.m, z.n, z.k, alpha, A, z.lda, B, z.ldb, beta, C, z.ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, z.m, z.n, z.k, alpha, A, z.lda, B, z.ldb, beta, C, z.ldc);
}

template <class T>
void call_library(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                  const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const BlasSizes z = blas_sizes(M, N, K, lda, ldb, ldc);
  if constexpr (sizeof(T) == sizeof(float)) {
    if (gemm_backend() == GemmBackend::BLIS) {  // forced only (not in the automatic rule); one thread
      blis_calls.fetch_add(1, std::memory_order_relaxed);
      return blis_sgemm(trans_a, trans_b, M, N, K, alpha, A, z.lda, B, z.ldb, beta, C, z.ldc);
    }
#ifdef DDP_WITH_ONEDNN
    if (run_as_pool_blocks(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
    const int threads = openblas_get_num_threads();
    if (gemm_backend_for(M, N, K, threads) == GemmBackend::OneDNN) {
      if (threads > 1) park_pool_workers();  // oneDNN's OpenMP team gets the cores
      onednn_calls.fetch_add(1, std::memory_order_relaxed);
      return onednn_sgemm(trans_a, trans_b, M, N, K, alpha, A, z.lda, B, z.ldb, beta, C, z.ldc, threads);
    }
#endif
  }
  call_openblas(trans_a, trans_b, z, alpha, A, B, beta, C);
}
}  // namespace

GemmCounts gemm_counts() { return {openblas_calls.load(), onednn_calls.load(), blis_calls.load()}; }

int onednn_threads_of_this_thread() {
#ifdef DDP_WITH_ONEDNN
  return onednn_threads_now();
#else
  return 0;
#endif
}

template <class T>
void gemm_ld(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
             const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  DDP_CHECK(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N, "gemm: leading dimensions lda ",
            lda, ", ldb ", ldb, ", ldc ", ldc, " are shorter than the rows they hold (", trans_a ? M : K, ", ",
            trans_b ? K : N, ", ", N, ")");
  if (K == 0) {  // an empty sum: C = beta * C (a library may not touch C at all here)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
    return;
  }
  call_library(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <class T>
void gemm_ld_openblas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                      int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  call_openblas(trans_a, trans_b, blas_sizes(M, N, K, lda, ldb, ldc), alpha, A, B, beta, C);
}

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, const T* B,
          T beta, T* C) {
  // Leading dimensions are the stored row lengths of the row-major matrices.
  gemm_ld(trans_a, trans_b, M, N, K, alpha, A, trans_a ? M : K, B, trans_b ? K : N, beta, C, N);
}

template <class T>
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, T alpha,
                  const T* A, int64_t stride_a, const T* B, int64_t stride_b, T beta, T* C,
                  int64_t stride_c) {
  for (int64_t i = 0; i < batch; ++i)
    gemm(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, B + i * stride_b, beta, C + i * stride_c);
}

template <class T>
void fill_rows(const T* bias, int64_t rows, int64_t n, T* out) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(out + r * n, bias, static_cast<size_t>(n) * sizeof(T));
}

void set_blas_threads(int n) {
  DDP_CHECK(n >= 1, "set_blas_threads: ", n, " threads requested; give at least 1");
  openblas_set_num_threads(n);
}
int blas_threads() { return openblas_get_num_threads(); }

#define DDP_INSTANTIATE_GEMM(T)                                                                            \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, const T*, T, T*);              \
  template void gemm_ld<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, int64_t, \
                           T, T*, int64_t);                                                                \
  template void gemm_ld_openblas<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, \
                                    int64_t, T, T*, int64_t);                                              \
  template void gemm_batched<T>(bool, bool, int64_t, int64_t, int64_t, int64_t, T, const T*, int64_t,      \
                                const T*, int64_t, T, T*, int64_t);                                        \
  template void fill_rows<T>(const T*, int64_t, int64_t, T*);
DDP_INSTANTIATE_GEMM(float)
DDP_INSTANTIATE_GEMM(double)
#undef DDP_INSTANTIATE_GEMM

}  // namespace ddp::kernels::cpu

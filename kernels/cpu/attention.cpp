// attention.cpp - CPU causal self-attention: per (batch, head), OpenBLAS gemms on strided (T, hs) blocks of
// qkv and a causal softmax over the rows of the (T, T) score matrix.
#include "kernels/cpu/attention.h"

#include <cblas.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/softmax.h"

namespace ddp::kernels::cpu {
namespace {
// Row-major C (M, N) = alpha * op(A) op(B) + beta * C.
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N),
              int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N),
              int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}
}  // namespace

template <class S>
void attention_forward(const S* qkv, S* y, S* att, int64_t B, int64_t T, int64_t C, int64_t n_head) {
  const int64_t hs = C / n_head, ld = 3 * C;
  const S scale = static_cast<S>(1.0 / std::sqrt(static_cast<double>(hs)));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < n_head; ++h) {
      const S* q = qkv + b * T * ld + h * hs;
      const S* k = q + C;
      const S* v = q + 2 * C;
      S* a = att + (b * n_head + h) * T * T;
      gemm(false, true, T, T, hs, scale, q, ld, k, ld, S(0), a, T);  // scores = q k^T / sqrt(hs)
      for (int64_t i = 0; i < T; ++i) {                              // causal softmax of row i over j <= i
        S* row = a + i * T;
        const S m = row_max(row, i + 1);
        S sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - m);
          sum += row[j];
        }
        const S inv = S(1) / sum;
        for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
        for (int64_t j = i + 1; j < T; ++j) row[j] = S(0);
      }
      gemm(false, false, T, hs, T, S(1), a, T, v, ld, S(0), y + b * T * C + h * hs, C);  // y_h = att v
    }
  }
}

template <class S>
void attention_backward(const S* dy, const S* qkv, const S* att, S* dqkv, int64_t B, int64_t T, int64_t C,
                        int64_t n_head) {
  const int64_t hs = C / n_head, ld = 3 * C;
  const S scale = static_cast<S>(1.0 / std::sqrt(static_cast<double>(hs)));
  std::vector<S> dscore(static_cast<size_t>(T * T));
  S* ds = dscore.data();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < n_head; ++h) {
      const S* q = qkv + b * T * ld + h * hs;
      const S* k = q + C;
      const S* v = q + 2 * C;
      const S* a = att + (b * n_head + h) * T * T;
      const S* dyh = dy + b * T * C + h * hs;
      S* dq = dqkv + b * T * ld + h * hs;
      S* dk = dq + C;
      S* dv = dq + 2 * C;
      gemm(false, true, T, T, hs, S(1), dyh, C, v, ld, S(0), ds, T);  // datt = dy v^T
      gemm(true, false, T, hs, T, S(1), a, T, dyh, C, S(0), dv, ld);  // dv = att^T dy
      for (int64_t i = 0; i < T; ++i) {  // softmax backward; masked entries have att = 0 and get 0
        const S* ar = a + i * T;
        S* dr = ds + i * T;
        const S s = row_dot(ar, dr, i + 1);
        for (int64_t j = 0; j <= i; ++j) dr[j] = ar[j] * (dr[j] - s);
        for (int64_t j = i + 1; j < T; ++j) dr[j] = S(0);
      }
      gemm(false, false, T, hs, T, scale, ds, T, k, ld, S(0), dq, ld);  // dq = dscore k / sqrt(hs)
      gemm(true, false, T, hs, T, scale, ds, T, q, ld, S(0), dk, ld);   // dk = dscore^T q / sqrt(hs)
    }
  }
}

template void attention_forward<float>(const float*, float*, float*, int64_t, int64_t, int64_t, int64_t);
template void attention_forward<double>(const double*, double*, double*, int64_t, int64_t, int64_t, int64_t);
template void attention_backward<float>(const float*, const float*, const float*, float*, int64_t, int64_t,
                                        int64_t, int64_t);
template void attention_backward<double>(const double*, const double*, const double*, double*, int64_t,
                                         int64_t, int64_t, int64_t);

}  // namespace ddp::kernels::cpu

// attention_bf16.cpp - the CPU emulation of bf16 attention: the float32 attention of attention.cpp with the
// probabilities and the softmax gradient rounded to bf16 before they enter a GEMM (operands q, k, v, dy come
// rounded from the caller; products of bf16 values are exact in float32, sums are float32).
#include "kernels/cpu/attention_bf16.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/softmax.h"

namespace ddp::kernels::cpu {
namespace {
// C = alpha op(A) op(B) on OpenBLAS (beta 0).
void gemm_beta0(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                const float* B, int64_t ldb, float* C, int64_t ldc) {
  gemm_ld_openblas(ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.f, C, ldc);
}
}  // namespace

void attention_forward_bf16(const float* qkv, float* y, float* att, int64_t B, int64_t T, int64_t C,
                            int64_t n_head) {
  const int64_t hs = C / n_head, ld = 3 * C;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs)));
  std::vector<float> rounded(static_cast<size_t>(T * T));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < n_head; ++h) {
      const float* q = qkv + b * T * ld + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* a = att + (b * n_head + h) * T * T;
      gemm_beta0(false, true, T, T, hs, scale, q, ld, k, ld, a, T);  // scores = q k^T / sqrt(hs)
      for (int64_t i = 0; i < T; ++i) {                        // causal softmax in float32
        float* row = a + i * T;
        const float m = row_max(row, i + 1);
        float sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - m);
          sum += row[j];
        }
        const float inv = 1.f / sum;
        for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
        for (int64_t j = i + 1; j < T; ++j) row[j] = 0.f;
      }
      std::copy(a, a + T * T, rounded.begin());
      round_to_bf16(rounded.data(), T * T);
      gemm_beta0(false, false, T, hs, T, 1.f, rounded.data(), T, v, ld, y + b * T * C + h * hs,
                 C);  // y_h = att v
    }
  }
}

void attention_backward_bf16(const float* dy, const float* qkv, const float* att, float* dqkv, int64_t B,
                             int64_t T, int64_t C, int64_t n_head) {
  const int64_t hs = C / n_head, ld = 3 * C;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs)));
  std::vector<float> ds(static_cast<size_t>(T * T)), ar(static_cast<size_t>(T * T));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < n_head; ++h) {
      const float* q = qkv + b * T * ld + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      const float* a = att + (b * n_head + h) * T * T;
      const float* dyh = dy + b * T * C + h * hs;
      float* dq = dqkv + b * T * ld + h * hs;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      std::copy(a, a + T * T, ar.begin());
      round_to_bf16(ar.data(), T * T);
      gemm_beta0(false, true, T, T, hs, 1.f, dyh, C, v, ld, ds.data(), T);   // datt = dy v^T
      gemm_beta0(true, false, T, hs, T, 1.f, ar.data(), T, dyh, C, dv, ld);  // dv = bf16(att)^T dy
      for (int64_t i = 0; i < T; ++i) {  // softmax backward in float32 with the float32 att
        const float* arow = a + i * T;
        float* dr = ds.data() + i * T;
        const float s = row_dot(arow, dr, i + 1);
        for (int64_t j = 0; j <= i; ++j) dr[j] = arow[j] * (dr[j] - s);
        for (int64_t j = i + 1; j < T; ++j) dr[j] = 0.f;
      }
      round_to_bf16(ds.data(), T * T);
      gemm_beta0(false, false, T, hs, T, scale, ds.data(), T, k, ld, dq,
                 ld);  // dq = bf16(dscore) k / sqrt(hs)
      gemm_beta0(true, false, T, hs, T, scale, ds.data(), T, q, ld, dk,
                 ld);  // dk = bf16(dscore)^T q / sqrt(hs)
    }
  }
}

}  // namespace ddp::kernels::cpu

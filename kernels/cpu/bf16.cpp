// bf16.cpp - CPU bfloat16 conversions and the emulated bf16 GEMM (convert operands, one float32 GEMM).
#include "kernels/cpu/bf16.h"

#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"

namespace ddp::kernels::cpu {

void to_bf16(const float* x, BFloat16* y, int64_t n) { convert(x, DType::F32, y, DType::BF16, n); }

void from_bf16(const BFloat16* x, float* y, int64_t n) { convert(x, DType::BF16, y, DType::F32, n); }

void round_to_bf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = BFloat16::from_float(x[i]).to_float();
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
               const BFloat16* A, int64_t stride_a, const BFloat16* B, int64_t stride_b, float beta, float* C,
               int64_t stride_c) {
  if (batch == 0) return;
  const int64_t na = (batch - 1) * stride_a + M * K, nb = (batch - 1) * stride_b + K * N;
  std::vector<float> a(static_cast<size_t>(na)), b(static_cast<size_t>(nb));
  from_bf16(A, a.data(), na);
  from_bf16(B, b.data(), nb);
  gemm_batched<float>(trans_a, trans_b, batch, M, N, K, alpha, a.data(), stride_a, b.data(), stride_b, beta,
                      C, stride_c);
}

void gemm_bf16_to_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const BFloat16* A,
                       const BFloat16* B, BFloat16* C) {
  std::vector<float> c(static_cast<size_t>(M * N));
  gemm_bf16(trans_a, trans_b, 1, M, N, K, 1.f, A, 0, B, 0, 0.f, c.data(), 0);
  to_bf16(c.data(), C, M * N);
}

}  // namespace ddp::kernels::cpu

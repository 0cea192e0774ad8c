// mlp_bf16.cpp - the CPU emulation of the fused bf16 MLP's GELU GEMMs: gemm_bf16 into a float32
// accumulator, then the shared per-element epilogue (mlp_bf16_epilogue.h), then the bias gradient's sums.
#include "kernels/cpu/mlp_bf16.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/mlp_bf16_epilogue.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce.h"

namespace ddp::kernels::cpu {

void gelu_linear_bf16(int64_t rows, int64_t out, int64_t in, const BFloat16* x, const BFloat16* w,
                      const BFloat16* bias, BFloat16* hidden, BFloat16* pre) {
  if (rows == 0 || out == 0) return;
  std::vector<float> acc(static_cast<size_t>(rows * out), 0.f);
  if (in > 0) gemm_bf16(false, true, 1, rows, out, in, 1.f, x, 0, w, 0, 0.f, acc.data(), 0);
  parallel_for(rows, 1, std::max<int64_t>(1, kParallelMinElements / out), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < out; ++j) {
        const int64_t i = r * out + j;
        const GeluBiasBf16 e = gelu_bias_epilogue(acc[i], bias ? bf16_bits_to_float(bias[j].bits) : 0.f);
        hidden[i].bits = e.hidden;
        pre[i].bits = e.pre;
      }
  });
}

void dgelu_matmul_bf16(int64_t rows, int64_t hidden, int64_t n, const BFloat16* g, const BFloat16* w,
                       const BFloat16* pre, BFloat16* d_pre, BFloat16* d_bias) {
  if (d_bias) std::fill(d_bias, d_bias + hidden, BFloat16{});
  if (rows == 0 || hidden == 0) return;
  std::vector<float> acc(static_cast<size_t>(rows * hidden), 0.f);
  if (n > 0) gemm_bf16(false, false, 1, rows, hidden, n, 1.f, g, 0, w, 0, 0.f, acc.data(), 0);
  parallel_for(rows * hidden, 1, kParallelMinElements, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      d_pre[i].bits = dgelu_epilogue(acc[i], pre[i].bits);
      acc[i] = bf16_bits_to_float(d_pre[i].bits);  // what the bias gradient sums
    }
  });
  if (d_bias) {
    std::vector<float> sums(static_cast<size_t>(hidden));
    sum_middle(acc.data(), 1, rows, hidden, sums.data(), 1.0);
    to_bf16(sums.data(), d_bias, hidden);
  }
}

}  // namespace ddp::kernels::cpu

// attention.cpp - CPU causal self-attention: per (batch, head), gemms (kernels/cpu/gemm.h: the library the
// backend rule picks; OpenBLAS for these 64x64x32-sized blocks) on strided (T, hs) blocks of qkv read in place
// through leading dimensions, and a fused causal softmax over the rows of the (T, T) score matrix (row i reads
// only j <= i: no mask is materialised) while the block is still in cache. The softmax rows are vectorized
// with Google Highway (per instruction set, run-time choice).
// One batched call per product instead of the loop was measured and rejected (docs/benchmarks.md): oneDNN's
// batched matmul over (batch, head) with these strides ran the forward's two products in 296 us against 242 us
// for the loop at 1 thread (OpenBLAS 0.3.21 has no batched sgemm).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"
#include "kernels/cpu/simd-inl.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
namespace {
// a (T, T): row i becomes softmax of its first i + 1 entries, zeros after.
template <class S>
void CausalSoftmax(S* a, int64_t T) {
  for (int64_t i = 0; i < T; ++i) {
    S* row = a + i * T;
    const S sum = RowExpSum(row, row, i + 1, RowMax(row, i + 1));
    RowAffine(row, row, i + 1, S(1) / sum, S(0));
    std::memset(row + i + 1, 0, static_cast<size_t>(T - i - 1) * sizeof(S));
  }
}
// ds (T, T) = att * (ds - rowdot(att, ds)) on the causal part, zeros after.
template <class S>
void CausalSoftmaxBackward(const S* a, S* ds, int64_t T) {
  const hn::ScalableTag<S> d;
  for (int64_t i = 0; i < T; ++i) {
    const S* ar = a + i * T;
    S* dr = ds + i * T;
    const auto s = hn::Set(d, RowDot(ar, dr, i + 1));
    MapBinary(d, ar, dr, dr, i + 1,
              [s](auto, auto va, auto vd) HWY_ATTR { return hn::Mul(va, hn::Sub(vd, s)); });
    std::memset(dr + i + 1, 0, static_cast<size_t>(T - i - 1) * sizeof(S));
  }
}
}  // namespace
void CausalSoftmaxF32(float* a, int64_t T) { CausalSoftmax(a, T); }
void CausalSoftmaxF64(double* a, int64_t T) { CausalSoftmax(a, T); }
void CausalSoftmaxBackwardF32(const float* a, float* ds, int64_t T) { CausalSoftmaxBackward(a, ds, T); }
void CausalSoftmaxBackwardF64(const double* a, double* ds, int64_t T) { CausalSoftmaxBackward(a, ds, T); }
}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ddp::kernels::cpu {
HWY_EXPORT(CausalSoftmaxF32);
HWY_EXPORT(CausalSoftmaxF64);
HWY_EXPORT(CausalSoftmaxBackwardF32);
HWY_EXPORT(CausalSoftmaxBackwardF64);
namespace {
void causal_softmax(float* a, int64_t T) { HWY_DYNAMIC_DISPATCH(CausalSoftmaxF32)(a, T); }
void causal_softmax(double* a, int64_t T) { HWY_DYNAMIC_DISPATCH(CausalSoftmaxF64)(a, T); }
void causal_softmax_backward(const float* a, float* ds, int64_t T) {
  HWY_DYNAMIC_DISPATCH(CausalSoftmaxBackwardF32)(a, ds, T);
}
void causal_softmax_backward(const double* a, double* ds, int64_t T) {
  HWY_DYNAMIC_DISPATCH(CausalSoftmaxBackwardF64)(a, ds, T);
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
      gemm_ld(false, true, T, T, hs, scale, q, ld, k, ld, S(0), a, T);  // scores = q k^T / sqrt(hs)
      causal_softmax(a, T);
      gemm_ld(false, false, T, hs, T, S(1), a, T, v, ld, S(0), y + b * T * C + h * hs, C);  // y_h = att v
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
      gemm_ld(false, true, T, T, hs, S(1), dyh, C, v, ld, S(0), ds, T);  // datt = dy v^T
      gemm_ld(true, false, T, hs, T, S(1), a, T, dyh, C, S(0), dv, ld);  // dv = att^T dy
      causal_softmax_backward(a, ds, T);                              // masked entries have att = 0 and get 0
      gemm_ld(false, false, T, hs, T, scale, ds, T, k, ld, S(0), dq, ld);  // dq = dscore k / sqrt(hs)
      gemm_ld(true, false, T, hs, T, scale, ds, T, q, ld, S(0), dk, ld);   // dk = dscore^T q / sqrt(hs)
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
#endif  // HWY_ONCE

// attention.cpp - CPU causal self-attention: per (batch, head), gemms (kernels/cpu/gemm.h: the library the
// backend rule picks; OpenBLAS for these 32x64x32-sized blocks) on strided (T, hs) blocks of qkv read in
// place through leading dimensions, over the causal part only (blocks of 32 score rows, each against the keys
// it can see), and a fused causal softmax over the rows of the (T, T) score matrix (row i reads only j <= i:
// no mask is materialised) while the block is still in cache. The softmax rows are vectorized with Google
// Highway (per instruction set, run-time choice). With a thread budget above 1 the (batch, head) pairs are
// spread over the intra-op pool (kernels/cpu/parallel.h). One batched call per product instead of the loop
// was measured and rejected (docs/benchmarks.md): oneDNN's batched matmul over (batch, head) with these
// strides ran the forward's two products in 296 us against 242 us for the loop at 1 thread (OpenBLAS 0.3.21
// has no batched sgemm).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"
#include "kernels/cpu/simd-inl.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
namespace {
// Rows of up to this many vectors are held in registers by CausalSoftmax (T = 64 at float32 with AVX-512).
constexpr int64_t kSoftmaxRowVectors = 8;

// a (T, T), rows r0..r1-1: row i becomes softmax of its first i + 1 entries, zeros after.
// When a row is whole vectors of at most kSoftmaxRowVectors (T a multiple of the lanes), it is loaded once,
// kept in registers through max, exp-sum and scaling, and stored whole, zeros included: the operations and
// their order are those of the loop below (RowMax, RowExpSum, RowAffine: the same bits), without its three
// passes over memory and a memset per row (rows are latency-bound: 22 ns each at T = 64 before).
template <class S>
void CausalSoftmax(S* a, int64_t T, int64_t r0, int64_t r1) {
  const hn::ScalableTag<S> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  if (T % N == 0 && T <= kSoftmaxRowVectors * N) {
    const V neg_inf = hn::Set(d, -std::numeric_limits<S>::infinity()), one = hn::Set(d, S(1)),
            zero = hn::Zero(d);
    V v[kSoftmaxRowVectors];
    for (int64_t i = r0; i < r1; ++i) {
      S* row = a + i * T;
      const int64_t n = i + 1, full = n / N, rest = n % N, used = full + (rest ? 1 : 0);
      V m = neg_inf;
      for (int64_t k = 0; k < full; ++k) m = hn::Max(m, v[k] = hn::LoadU(d, row + k * N));
      if (rest)
        m = hn::Max(m, v[full] = LoadTail(d, row + full * N, rest, -std::numeric_limits<S>::infinity()));
      const V shift = hn::Set(d, hn::GetLane(hn::MaxOfLanes(d, m)));
      V sum = zero;
      for (int64_t k = 0; k < used; ++k) sum = hn::Add(sum, v[k] = ExpFast(d, hn::MulSub(one, v[k], shift)));
      const V scale = hn::Set(d, S(1) / ReduceSum(d, sum));
      for (int64_t k = 0; k < full; ++k) hn::StoreU(hn::MulAdd(scale, v[k], zero), d, row + k * N);
      if (rest)  // lanes past the row's end: +0, as the loop's memset
        hn::StoreU(
            hn::IfThenElseZero(hn::FirstN(d, static_cast<size_t>(rest)), hn::MulAdd(scale, v[full], zero)), d,
            row + full * N);
      for (int64_t k = used; k < T / N; ++k) hn::StoreU(zero, d, row + k * N);
    }
    return;
  }
  for (int64_t i = r0; i < r1; ++i) {
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
void CausalSoftmaxF32(float* a, int64_t T, int64_t r0, int64_t r1) { CausalSoftmax(a, T, r0, r1); }
void CausalSoftmaxF64(double* a, int64_t T, int64_t r0, int64_t r1) { CausalSoftmax(a, T, r0, r1); }
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
void causal_softmax_rows(float* a, int64_t T, int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(CausalSoftmaxF32)(a, T, r0, r1);
}
void causal_softmax_rows(double* a, int64_t T, int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(CausalSoftmaxF64)(a, T, r0, r1);
}
void causal_softmax_backward(const float* a, float* ds, int64_t T) {
  HWY_DYNAMIC_DISPATCH(CausalSoftmaxBackwardF32)(a, ds, T);
}
void causal_softmax_backward(const double* a, double* ds, int64_t T) {
  HWY_DYNAMIC_DISPATCH(CausalSoftmaxBackwardF64)(a, ds, T);
}

}  // namespace

// Rows of the score matrix per block: block r (rows r0..r1-1) needs keys 0..r1-1 only, so every product runs
// on the causal part block by block (for T = 64: 3/4 of the full products' FLOPs; for T = 256: 9/16) instead
// of multiplying the zeros above the diagonal. The entries the blocks skip are zeros (or never read), so the
// values are those of the full products up to the order of additions of exact zeros.
constexpr int64_t kAttentionRowBlock = 32;

// xt (hs, T) = x^T for x (T, hs) with leading dimension ld (OpenBLAS's out-of-place transpose: 2-3x a tiled
// loop here). The products against k^T and v^T then run as plain (NN) products, which OpenBLAS serves with
// its small-matrix kernels; as NT products it packed both operands and cleared the output first (T = 256: 19
// against 12 us per (batch, head) for the score rows, the copy included).
// An empty x (T or hs 0) has nothing to copy, and OpenBLAS would print a complaint about the zero dimension.
void transpose_head(const float* x, int64_t ld, int64_t T, int64_t hs, float* xt) {
  if (T == 0 || hs == 0) return;
  cblas_somatcopy(CblasRowMajor, CblasTrans, static_cast<blasint>(T), static_cast<blasint>(hs), 1.0f, x,
                  static_cast<blasint>(ld), xt, static_cast<blasint>(T));
}
void transpose_head(const double* x, int64_t ld, int64_t T, int64_t hs, double* xt) {
  if (T == 0 || hs == 0) return;
  cblas_domatcopy(CblasRowMajor, CblasTrans, static_cast<blasint>(T), static_cast<blasint>(hs), 1.0, x,
                  static_cast<blasint>(ld), xt, static_cast<blasint>(T));
}

// (batch, head) pairs are independent, so both passes spread them over the intra-op pool (bitwise the same
// at any split) when OpenBLAS runs every product of a pair on the calling thread: it gives a product its own
// threads only above 4 x 65536 multiply-adds (M N K), and the largest here is 32 x T x hs. At least this many
// pairs per thread: a pair is 3-80 us (T = 64..256), the pool's wake-up 5-20 us.
constexpr int64_t kAttentionMinPairsPerThread = 4;
bool attention_pairs_split(int64_t T, int64_t hs) { return kAttentionRowBlock * T * hs <= 4 * 65536; }

template <class S>
void attention_forward(const S* qkv, S* y, S* att, int64_t B, int64_t T, int64_t C, int64_t n_head) {
  const int64_t hs = C / n_head, ld = 3 * C;
  const S scale = static_cast<S>(1.0 / std::sqrt(static_cast<double>(hs)));
  auto pairs = [&](int64_t p0, int64_t p1) {
    std::vector<S> k_transposed(static_cast<size_t>(hs * T));
    S* kt = k_transposed.data();
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / n_head, h = p % n_head;
      const S* q = qkv + b * T * ld + h * hs;
      const S* k = q + C;
      const S* v = q + 2 * C;
      S* a = att + p * T * T;
      S* yh = y + b * T * C + h * hs;
      transpose_head(k, ld, T, hs, kt);
      for (int64_t r0 = 0; r0 < T; r0 += kAttentionRowBlock) {
        const int64_t r1 = std::min(T, r0 + kAttentionRowBlock), rows = r1 - r0;
        // scores[r0:r1, 0:r1] = q k^T / sqrt(hs); then row i softmax over j <= i, zeros after
        gemm_ld(false, false, rows, r1, hs, scale, q + r0 * ld, ld, kt, T, S(0), a + r0 * T, T);
        causal_softmax_rows(a, T, r0, r1);
        gemm_ld(false, false, rows, hs, r1, S(1), a + r0 * T, T, v, ld, S(0), yh + r0 * C, C);  // y = att v
      }
    }
  };
  if (attention_pairs_split(T, hs))
    parallel_for(B * n_head, 1, kAttentionMinPairsPerThread, pairs);
  else
    pairs(0, B * n_head);
}

template <class S>
void attention_backward(const S* dy, const S* qkv, const S* att, S* dqkv, int64_t B, int64_t T, int64_t C,
                        int64_t n_head) {
  const int64_t hs = C / n_head, ld = 3 * C;
  const S scale = static_cast<S>(1.0 / std::sqrt(static_cast<double>(hs)));
  const int64_t R = kAttentionRowBlock;
  auto pairs = [&](int64_t p0, int64_t p1) {
    std::vector<S> dscore(static_cast<size_t>(T * T)), v_transposed(static_cast<size_t>(hs * T));
    S* ds = dscore.data();
    S* vt = v_transposed.data();
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / n_head, h = p % n_head;
      const S* q = qkv + b * T * ld + h * hs;
      const S* k = q + C;
      const S* v = q + 2 * C;
      const S* a = att + p * T * T;
      const S* dyh = dy + b * T * C + h * hs;
      S* dq = dqkv + b * T * ld + h * hs;
      S* dk = dq + C;
      S* dv = dq + 2 * C;
      // Score rows r0..r1 reach keys 0..r1; keys c0..c1 are reached by score rows c0..T.
      transpose_head(v, ld, T, hs, vt);
      for (int64_t r0 = 0; r0 < T; r0 += R) {  // datt = dy v^T on the causal part
        const int64_t r1 = std::min(T, r0 + R);
        gemm_ld(false, false, r1 - r0, r1, hs, S(1), dyh + r0 * C, C, vt, T, S(0), ds + r0 * T, T);
      }
      for (int64_t c0 = 0; c0 < T; c0 += R) {  // dv = att^T dy
        const int64_t c1 = std::min(T, c0 + R);
        gemm_ld(true, false, c1 - c0, hs, T - c0, S(1), a + c0 * T + c0, T, dyh + c0 * C, C, S(0),
                dv + c0 * ld, ld);
      }
      causal_softmax_backward(a, ds, T);       // reads j <= i only (masked entries have att = 0), zeros after
      for (int64_t r0 = 0; r0 < T; r0 += R) {  // dq = dscore k / sqrt(hs)
        const int64_t r1 = std::min(T, r0 + R);
        gemm_ld(false, false, r1 - r0, hs, r1, scale, ds + r0 * T, T, k, ld, S(0), dq + r0 * ld, ld);
      }
      for (int64_t c0 = 0; c0 < T; c0 += R) {  // dk = dscore^T q / sqrt(hs)
        const int64_t c1 = std::min(T, c0 + R);
        gemm_ld(true, false, c1 - c0, hs, T - c0, scale, ds + c0 * T + c0, T, q + c0 * ld, ld, S(0),
                dk + c0 * ld, ld);
      }
    }
  };
  if (attention_pairs_split(T, hs))
    parallel_for(B * n_head, 1, kAttentionMinPairsPerThread, pairs);
  else
    pairs(0, B * n_head);
}

template void attention_forward<float>(const float*, float*, float*, int64_t, int64_t, int64_t, int64_t);
template void attention_forward<double>(const double*, double*, double*, int64_t, int64_t, int64_t, int64_t);
template void attention_backward<float>(const float*, const float*, const float*, float*, int64_t, int64_t,
                                        int64_t, int64_t);
template void attention_backward<double>(const double*, const double*, const double*, double*, int64_t,
                                         int64_t, int64_t, int64_t);

}  // namespace ddp::kernels::cpu
#endif  // HWY_ONCE

// loss.cpp - CPU cross-entropy (fused, one pass per row over the logits; vectorized with Google Highway,
// compiled per instruction set and chosen at run time) and MSE, forward and backward. float32 forward: per
// block of 16 rows the sums of exp(x - max) (simd-inl.h's RowsExp2SumF32, nothing written; on AVX-512 the
// block's maxima were found while the previous block's exps ran), then the 16 logs in one vectorized pass;
// one call per thread's range of rows, the loss summed per 64-row block afterwards (the same sum for any
// thread count).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/loss.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"
#include "kernels/cpu/simd-inl.h"

#include <algorithm>
#include <cmath>
#include <vector>
#include <cstdint>

#include "kernels/cpu/index_check.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
namespace {
// lse[r] = log(sum_c exp(logits[r][c])) and picked[r] = logits[r][targets[r]] (0 for an ignored row) for
// rows [0, rows); float32 per block of 16 rows, each block's maxima found while the previous block's exps run
// (RowsLogSumExpF32 with NextRowMaxima), so one call should cover a thread's whole range of rows; the picked
// logits are read right after their block (still in L1).
template <class T>
void CrossEntropyRows(const T* logits, const int64_t* targets, int64_t rows, int64_t cols, bool has_ignore,
                      int64_t ignore_index, T* lse, T* picked) {
  NextRowMaxima next_maxima;
  for (int64_t r0 = 0; r0 < rows; r0 += kExpRowsBlock) {
    const int64_t nb = std::min(kExpRowsBlock, rows - r0);
    if constexpr (sizeof(T) == 4) {
      RowsLogSumExpF32(logits + r0 * cols, nb, cols, lse + r0, rows - r0, nullptr, &next_maxima);
    } else {
      for (int64_t r = r0; r < r0 + nb; ++r) lse[r] = RowLogSumExp(logits + r * cols, cols);
    }
    for (int64_t r = r0; r < r0 + nb; ++r) {
      const int64_t t = targets[r];
      picked[r] = has_ignore && t == ignore_index ? T(0) : logits[r * cols + t];
    }
  }
}

template <class T>
void CrossEntropyBackward(const T* logits, const int64_t* targets, const T* lse, const T* dloss,
                          double divisor, int64_t rows, int64_t cols, bool has_ignore, int64_t ignore_index,
                          T* dlogits) {
  const hn::ScalableTag<T> d;
  const T scale = static_cast<T>(static_cast<double>(dloss[0]) / divisor);
  const auto vscale = hn::Set(d, scale);
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = logits + r * cols;
    T* dr = dlogits + r * cols;
    const int64_t t = targets[r];
    if (has_ignore && t == ignore_index) {
      for (int64_t c = 0; c < cols; ++c) dr[c] = T(0);
      continue;
    }
    const auto l = hn::Set(d, lse[r]);
    MapUnary(d, xr, dr, cols,
             [l, vscale](auto dd, auto v) HWY_ATTR { return hn::Mul(vscale, ExpFast(dd, hn::Sub(v, l))); });
    dr[t] -= scale;
  }
}
}  // namespace

void CrossEntropyRowsF32(const float* logits, const int64_t* targets, int64_t rows, int64_t cols,
                         bool has_ignore, int64_t ignore_index, float* lse, float* picked) {
  CrossEntropyRows(logits, targets, rows, cols, has_ignore, ignore_index, lse, picked);
}
void CrossEntropyRowsF64(const double* logits, const int64_t* targets, int64_t rows, int64_t cols,
                         bool has_ignore, int64_t ignore_index, double* lse, double* picked) {
  CrossEntropyRows(logits, targets, rows, cols, has_ignore, ignore_index, lse, picked);
}
void CrossEntropyBackwardF32(const float* logits, const int64_t* targets, const float* lse,
                             const float* dloss, double divisor, int64_t rows, int64_t cols, bool has_ignore,
                             int64_t ignore_index, float* dlogits) {
  CrossEntropyBackward(logits, targets, lse, dloss, divisor, rows, cols, has_ignore, ignore_index, dlogits);
}
void CrossEntropyBackwardF64(const double* logits, const int64_t* targets, const double* lse,
                             const double* dloss, double divisor, int64_t rows, int64_t cols, bool has_ignore,
                             int64_t ignore_index, double* dlogits) {
  CrossEntropyBackward(logits, targets, lse, dloss, divisor, rows, cols, has_ignore, ignore_index, dlogits);
}

}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ddp::kernels::cpu {
HWY_EXPORT(CrossEntropyRowsF32);
HWY_EXPORT(CrossEntropyRowsF64);
HWY_EXPORT(CrossEntropyBackwardF32);
HWY_EXPORT(CrossEntropyBackwardF64);

int64_t first_bad_target(const int64_t* targets, int64_t rows, int64_t cols, bool has_ignore,
                         int64_t ignore_index) {
  for (int64_t r = 0; r < rows; ++r)
    if (target_is_bad(targets[r], cols, has_ignore, ignore_index)) return r;
  return -1;
}

template <class T>
double cross_entropy_forward(const T* logits, const int64_t* targets, int64_t rows, int64_t cols,
                             bool has_ignore, int64_t ignore_index, T* lse, int64_t* count) {
  // The loss sums over rows: per block of kBlockRows rows (a fixed split, whatever the thread count), then
  // the block sums are added in block order.
  constexpr int64_t kBlockRows = 64;
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  std::vector<double> totals(static_cast<size_t>(blocks));
  std::vector<int64_t> counts(static_cast<size_t>(blocks));
  const int64_t min_blocks =
      std::max<int64_t>(1, kParallelMinElements / std::max<int64_t>(kBlockRows * cols, 1));
  std::vector<T> picked(static_cast<size_t>(rows));
  parallel_for(blocks, 1, min_blocks, [&](int64_t b0, int64_t b1) {
    // one call for the thread's rows (its blocks' log-sum-exps pipeline into each other), then the sums
    const int64_t first = b0 * kBlockRows, last = std::min(rows, b1 * kBlockRows);
    const int64_t* tg = targets + first;
    if constexpr (sizeof(T) == 4) {
      HWY_DYNAMIC_DISPATCH(CrossEntropyRowsF32)
      (logits + first * cols, tg, last - first, cols, has_ignore, ignore_index, lse + first,
       picked.data() + first);
    } else {
      HWY_DYNAMIC_DISPATCH(CrossEntropyRowsF64)
      (logits + first * cols, tg, last - first, cols, has_ignore, ignore_index, lse + first,
       picked.data() + first);
    }
    for (int64_t blk = b0; blk < b1; ++blk) {
      double total = 0;
      int64_t count = 0;
      for (int64_t r = blk * kBlockRows; r < std::min(rows, (blk + 1) * kBlockRows); ++r) {
        if (has_ignore && targets[r] == ignore_index) continue;
        total += static_cast<double>(lse[r]) - static_cast<double>(picked[static_cast<size_t>(r)]);
        ++count;
      }
      totals[blk] = total;
      counts[blk] = count;
    }
  });
  double total = 0;
  int64_t n = 0;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    total += totals[blk];
    n += counts[blk];
  }
  *count = n;
  return total;
}

template <class T>
void cross_entropy_backward(const T* logits, const int64_t* targets, const T* lse, const T* dloss,
                            double divisor, int64_t rows, int64_t cols, bool has_ignore, int64_t ignore_index,
                            T* dlogits) {
  const int64_t min_rows = std::max<int64_t>(1, kParallelMinElements / std::max<int64_t>(cols, 1));
  parallel_for(rows, 1, min_rows, [&](int64_t b, int64_t e) {
    const int64_t o = b * cols;
    if constexpr (sizeof(T) == 4) HWY_DYNAMIC_DISPATCH(CrossEntropyBackwardF32)
    (logits + o, targets + b, lse + b, dloss, divisor, e - b, cols, has_ignore, ignore_index, dlogits + o);
    else HWY_DYNAMIC_DISPATCH(CrossEntropyBackwardF64)(logits + o, targets + b, lse + b, dloss, divisor,
                                                       e - b, cols, has_ignore, ignore_index, dlogits + o);
  });
}

template <class T>
double mse_forward(const T* pred, const T* target, int64_t n) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(pred[i]) - static_cast<double>(target[i]);
    total += d * d;
  }
  return total;
}

template <class T>
void mse_backward(const T* pred, const T* target, const T* dloss, int64_t n, T* dpred, T* dtarget) {
  const T scale = static_cast<T>(2.0 * static_cast<double>(dloss[0]) / static_cast<double>(n));
  if (dpred)
    for (int64_t i = 0; i < n; ++i) dpred[i] = scale * (pred[i] - target[i]);
  if (dtarget)
    for (int64_t i = 0; i < n; ++i) dtarget[i] = scale * (target[i] - pred[i]);
}

#define DDP_INSTANTIATE(T)                                                                                \
  template double cross_entropy_forward<T>(const T*, const int64_t*, int64_t, int64_t, bool, int64_t, T*, \
                                           int64_t*);                                                     \
  template void cross_entropy_backward<T>(const T*, const int64_t*, const T*, const T*, double, int64_t,  \
                                          int64_t, bool, int64_t, T*);                                    \
  template double mse_forward<T>(const T*, const T*, int64_t);                                            \
  template void mse_backward<T>(const T*, const T*, const T*, int64_t, T*, T*);
DDP_INSTANTIATE(float)
DDP_INSTANTIATE(double)
#undef DDP_INSTANTIATE

}  // namespace ddp::kernels::cpu
#endif  // HWY_ONCE

// softmax.cpp - CPU softmax / log-softmax forward and backward, one row at a time (rows are independent),
// vectorized with Google Highway (compiled per instruction set, chosen at run time). float32 forward: a max
// pass and an exp-and-sum pass per block of 16 rows (simd-inl.h's RowsExp2SumF32), then the scale
// (softmax) or x - logsumexp with the 16 rows' logs vectorized (log_softmax); float64 keeps ExpFast/std::log.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/softmax.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"
#include "kernels/cpu/simd-inl.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/softmax.h"

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
namespace {
template <class T>
void SoftmaxForward(const T* x, T* y, int64_t rows, int64_t cols) {
  if constexpr (sizeof(T) == 4) {
    alignas(64) double base[kExpRowsBlock];
    alignas(64) float sum[kExpRowsBlock];
    for (int64_t r0 = 0; r0 < rows; r0 += kExpRowsBlock) {
      const int64_t nb = std::min(kExpRowsBlock, rows - r0);
      RowsExp2SumF32<true>(x + r0 * cols, y + r0 * cols, nb, cols, base, sum, rows - r0);
      for (int64_t j = 0; j < nb; ++j)
        RowAffine(y + (r0 + j) * cols, y + (r0 + j) * cols, cols, 1.0f / sum[j], 0.0f);
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T s = RowExpSum(xr, yr, cols, RowMax(xr, cols));
    RowAffine(yr, yr, cols, T(1) / s, T(0));
  }
}
template <class T>
void LogSoftmaxForward(const T* x, T* y, int64_t rows, int64_t cols) {
  if constexpr (sizeof(T) == 4) {
    alignas(64) float lse[kExpRowsBlock];
    for (int64_t r0 = 0; r0 < rows; r0 += kExpRowsBlock) {
      const int64_t nb = std::min(kExpRowsBlock, rows - r0);
      RowsLogSumExpF32(x + r0 * cols, nb, cols, lse, rows - r0, y + r0 * cols);
      for (int64_t j = 0; j < nb; ++j)
        RowAffine(x + (r0 + j) * cols, y + (r0 + j) * cols, cols, 1.0f, -lse[j]);
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    const T shift = RowLogSumExp(xr, cols);
    RowAffine(xr, y + r * cols, cols, T(1), -shift);
  }
}
template <class T>
void SoftmaxBackward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols) {
  const hn::ScalableTag<T> d;
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    const auto s = hn::Set(d, RowDot(yr, dyr, cols));
    MapBinary(d, yr, dyr, dx + r * cols, cols,
              [s](auto, auto vy, auto vdy) HWY_ATTR { return hn::Mul(vy, hn::Sub(vdy, s)); });
  }
}
template <class T>
void LogSoftmaxBackward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols) {
  const hn::ScalableTag<T> d;
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    const auto s = hn::Set(d, RowSum(dyr, cols));
    MapBinary(d, yr, dyr, dx + r * cols, cols,
              [s](auto dd, auto vy, auto vdy) HWY_ATTR { return hn::NegMulAdd(ExpFast(dd, vy), s, vdy); });
  }
}
}  // namespace

#define DDP_SOFTMAX_ENTRY(Name)                                                             \
  void Name##F32(const float* a, const float* b, float* c, int64_t rows, int64_t cols) {    \
    Name<float>(a, b, c, rows, cols);                                                       \
  }                                                                                         \
  void Name##F64(const double* a, const double* b, double* c, int64_t rows, int64_t cols) { \
    Name<double>(a, b, c, rows, cols);                                                      \
  }
void SoftmaxForwardF32(const float* x, float* y, int64_t rows, int64_t cols) {
  SoftmaxForward(x, y, rows, cols);
}
void SoftmaxForwardF64(const double* x, double* y, int64_t rows, int64_t cols) {
  SoftmaxForward(x, y, rows, cols);
}
void LogSoftmaxForwardF32(const float* x, float* y, int64_t rows, int64_t cols) {
  LogSoftmaxForward(x, y, rows, cols);
}
void LogSoftmaxForwardF64(const double* x, double* y, int64_t rows, int64_t cols) {
  LogSoftmaxForward(x, y, rows, cols);
}
DDP_SOFTMAX_ENTRY(SoftmaxBackward)
DDP_SOFTMAX_ENTRY(LogSoftmaxBackward)
#undef DDP_SOFTMAX_ENTRY

}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ddp::kernels::cpu {
HWY_EXPORT(SoftmaxForwardF32);
HWY_EXPORT(SoftmaxForwardF64);
HWY_EXPORT(LogSoftmaxForwardF32);
HWY_EXPORT(LogSoftmaxForwardF64);
HWY_EXPORT(SoftmaxBackwardF32);
HWY_EXPORT(SoftmaxBackwardF64);
HWY_EXPORT(LogSoftmaxBackwardF32);
HWY_EXPORT(LogSoftmaxBackwardF64);

// Rows per thread at least: kParallelMinElements values.
int64_t min_rows(int64_t cols) {
  return std::max<int64_t>(1, kParallelMinElements / std::max<int64_t>(cols, 1));
}

template <class T>
void softmax_forward(const T* x, T* y, int64_t rows, int64_t cols) {
  parallel_for(rows, 1, min_rows(cols), [&](int64_t b, int64_t e) {
    if constexpr (sizeof(T) == 4)
      HWY_DYNAMIC_DISPATCH(SoftmaxForwardF32)(x + b * cols, y + b * cols, e - b, cols);
    else
      HWY_DYNAMIC_DISPATCH(SoftmaxForwardF64)(x + b * cols, y + b * cols, e - b, cols);
  });
}
template <class T>
void log_softmax_forward(const T* x, T* y, int64_t rows, int64_t cols) {
  parallel_for(rows, 1, min_rows(cols), [&](int64_t b, int64_t e) {
    if constexpr (sizeof(T) == 4)
      HWY_DYNAMIC_DISPATCH(LogSoftmaxForwardF32)(x + b * cols, y + b * cols, e - b, cols);
    else
      HWY_DYNAMIC_DISPATCH(LogSoftmaxForwardF64)(x + b * cols, y + b * cols, e - b, cols);
  });
}
template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols) {
  parallel_for(rows, 1, min_rows(cols), [&](int64_t b, int64_t e) {
    const int64_t o = b * cols;
    if constexpr (sizeof(T) == 4)
      HWY_DYNAMIC_DISPATCH(SoftmaxBackwardF32)(y + o, dy + o, dx + o, e - b, cols);
    else
      HWY_DYNAMIC_DISPATCH(SoftmaxBackwardF64)(y + o, dy + o, dx + o, e - b, cols);
  });
}
template <class T>
void log_softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols) {
  parallel_for(rows, 1, min_rows(cols), [&](int64_t b, int64_t e) {
    const int64_t o = b * cols;
    if constexpr (sizeof(T) == 4)
      HWY_DYNAMIC_DISPATCH(LogSoftmaxBackwardF32)(y + o, dy + o, dx + o, e - b, cols);
    else
      HWY_DYNAMIC_DISPATCH(LogSoftmaxBackwardF64)(y + o, dy + o, dx + o, e - b, cols);
  });
}

#define DDP_INSTANTIATE(T)                                                     \
  template void softmax_forward<T>(const T*, T*, int64_t, int64_t);            \
  template void log_softmax_forward<T>(const T*, T*, int64_t, int64_t);        \
  template void softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t); \
  template void log_softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t);
DDP_INSTANTIATE(float)
DDP_INSTANTIATE(double)
#undef DDP_INSTANTIATE

}  // namespace ddp::kernels::cpu
#endif  // HWY_ONCE

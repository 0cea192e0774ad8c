// layernorm.cpp - CPU layer norm forward (two-pass mean/variance per row) and backward, vectorized with
// Google Highway (compiled per instruction set, chosen at run time).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/layernorm.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"
#include "kernels/cpu/simd-inl.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/layernorm.h"

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
namespace {
template <class T>
void LayerNormForward(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t rows,
                      int64_t cols, double eps) {
  const hn::ScalableTag<T> d;
  const T inv_cols = T(1) / static_cast<T>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T m = RowSum(xr, cols) * inv_cols;
    RowAffine(xr, yr, cols, T(1), -m);  // centred values, reused below
    const T var = RowDot(yr, yr, cols) * inv_cols;
    const T rs = static_cast<T>(1.0 / std::sqrt(static_cast<double>(var) + eps));
    const auto vrs = hn::Set(d, rs);
    MapTernary(d, yr, weight, bias, yr, cols,
               [vrs](auto, auto c, auto w, auto b) HWY_ATTR { return hn::MulAdd(hn::Mul(c, vrs), w, b); });
    mean[r] = m;
    rstd[r] = rs;
  }
}

template <class T>
void LayerNormBackward(const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx,
                       T* dweight, T* dbias, int64_t rows, int64_t cols) {
  const hn::ScalableTag<T> d;
  if (dweight)
    for (int64_t c = 0; c < cols; ++c) dweight[c] = T(0);
  if (dbias)
    for (int64_t c = 0; c < cols; ++c) dbias[c] = T(0);
  std::vector<T> xhat(static_cast<size_t>(cols)), g(static_cast<size_t>(cols));
  const T inv_cols = T(1) / static_cast<T>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    const T m = mean[r], rs = rstd[r];
    const auto vm = hn::Set(d, m), vrs = hn::Set(d, rs);
    MapUnary(d, xr, xhat.data(), cols,
             [vm, vrs](auto, auto v) HWY_ATTR { return hn::Mul(hn::Sub(v, vm), vrs); });
    if (dweight)
      MapTernary(d, dweight, dyr, xhat.data(), dweight, cols,
                 [](auto, auto acc, auto vdy, auto vx) HWY_ATTR { return hn::MulAdd(vdy, vx, acc); });
    if (dbias)
      MapBinary(d, dbias, dyr, dbias, cols,
                [](auto, auto acc, auto vdy) HWY_ATTR { return hn::Add(acc, vdy); });
    if (!dx) continue;
    MapBinary(d, dyr, weight, g.data(), cols, [](auto, auto a, auto b) HWY_ATTR { return hn::Mul(a, b); });
    const auto mean_g = hn::Set(d, RowSum(g.data(), cols) * inv_cols);
    const auto mean_gx = hn::Set(d, RowDot(g.data(), xhat.data(), cols) * inv_cols);
    MapBinary(d, g.data(), xhat.data(), dx + r * cols, cols, [=](auto, auto vg, auto vx) HWY_ATTR {
      return hn::Mul(vrs, hn::NegMulAdd(vx, mean_gx, hn::Sub(vg, mean_g)));
    });
  }
}
}  // namespace

void LayerNormForwardF32(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                         int64_t rows, int64_t cols, double eps) {
  LayerNormForward(x, w, b, y, mean, rstd, rows, cols, eps);
}
void LayerNormForwardF64(const double* x, const double* w, const double* b, double* y, double* mean,
                         double* rstd, int64_t rows, int64_t cols, double eps) {
  LayerNormForward(x, w, b, y, mean, rstd, rows, cols, eps);
}
void LayerNormBackwardF32(const float* dy, const float* x, const float* w, const float* mean,
                          const float* rstd, float* dx, float* dw, float* db, int64_t rows, int64_t cols) {
  LayerNormBackward(dy, x, w, mean, rstd, dx, dw, db, rows, cols);
}
void LayerNormBackwardF64(const double* dy, const double* x, const double* w, const double* mean,
                          const double* rstd, double* dx, double* dw, double* db, int64_t rows,
                          int64_t cols) {
  LayerNormBackward(dy, x, w, mean, rstd, dx, dw, db, rows, cols);
}

}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ddp::kernels::cpu {
HWY_EXPORT(LayerNormForwardF32);
HWY_EXPORT(LayerNormForwardF64);
HWY_EXPORT(LayerNormBackwardF32);
HWY_EXPORT(LayerNormBackwardF64);

template <class T>
void layernorm_forward(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t rows,
                       int64_t cols, double eps) {
  if constexpr (sizeof(T) == 4)
    HWY_DYNAMIC_DISPATCH(LayerNormForwardF32)(x, weight, bias, y, mean, rstd, rows, cols, eps);
  else
    HWY_DYNAMIC_DISPATCH(LayerNormForwardF64)(x, weight, bias, y, mean, rstd, rows, cols, eps);
}
template <class T>
void layernorm_backward(const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx,
                        T* dweight, T* dbias, int64_t rows, int64_t cols) {
  if constexpr (sizeof(T) == 4)
    HWY_DYNAMIC_DISPATCH(LayerNormBackwardF32)(dy, x, weight, mean, rstd, dx, dweight, dbias, rows, cols);
  else
    HWY_DYNAMIC_DISPATCH(LayerNormBackwardF64)(dy, x, weight, mean, rstd, dx, dweight, dbias, rows, cols);
}

template void layernorm_forward<float>(const float*, const float*, const float*, float*, float*, float*,
                                       int64_t, int64_t, double);
template void layernorm_forward<double>(const double*, const double*, const double*, double*, double*,
                                        double*, int64_t, int64_t, double);
template void layernorm_backward<float>(const float*, const float*, const float*, const float*, const float*,
                                        float*, float*, float*, int64_t, int64_t);
template void layernorm_backward<double>(const double*, const double*, const double*, const double*,
                                         const double*, double*, double*, double*, int64_t, int64_t);
}  // namespace ddp::kernels::cpu
#endif  // HWY_ONCE

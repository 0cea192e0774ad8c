// layernorm.cpp - CPU layer norm forward (two-pass mean/variance per row) and backward, vectorized with
// Google Highway (compiled per instruction set, chosen at run time).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/layernorm.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"
#include "kernels/cpu/simd-inl.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <cstdint>
#include <vector>

#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/parallel.h"

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
  const int64_t min_rows = std::max<int64_t>(1, kParallelMinElements / std::max<int64_t>(cols, 1));
  parallel_for(rows, 1, min_rows, [&](int64_t b, int64_t e) {
    const int64_t o = b * cols;
    if constexpr (sizeof(T) == 4)
      HWY_DYNAMIC_DISPATCH(LayerNormForwardF32)(x + o, weight, bias, y + o, mean + b, rstd + b, e - b, cols, eps);
    else
      HWY_DYNAMIC_DISPATCH(LayerNormForwardF64)(x + o, weight, bias, y + o, mean + b, rstd + b, e - b, cols, eps);
  });
}
template <class T>
void layernorm_backward(const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx,
                        T* dweight, T* dbias, int64_t rows, int64_t cols) {
  // dweight and dbias sum over rows: per block of kBlockRows rows (a fixed split, whatever the thread
  // count) into its own partial row, then the partials are added in block order in double.
  constexpr int64_t kBlockRows = 64;
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  const bool partials = (dweight || dbias) && blocks > 1;
  std::vector<T> pw(partials && dweight ? static_cast<size_t>(blocks * cols) : 0),
      pb(partials && dbias ? static_cast<size_t>(blocks * cols) : 0);
  const int64_t min_blocks = std::max<int64_t>(1, kParallelMinElements / std::max<int64_t>(kBlockRows * cols, 1));
  parallel_for(blocks, 1, min_blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t r0 = blk * kBlockRows, n = std::min(rows, r0 + kBlockRows) - r0, o = r0 * cols;
      T* dw = !dweight ? nullptr : partials ? pw.data() + blk * cols : dweight;
      T* db = !dbias ? nullptr : partials ? pb.data() + blk * cols : dbias;
      if constexpr (sizeof(T) == 4)
        HWY_DYNAMIC_DISPATCH(LayerNormBackwardF32)(dy + o, x + o, weight, mean + r0, rstd + r0,
                                                   dx ? dx + o : nullptr, dw, db, n, cols);
      else
        HWY_DYNAMIC_DISPATCH(LayerNormBackwardF64)(dy + o, x + o, weight, mean + r0, rstd + r0,
                                                   dx ? dx + o : nullptr, dw, db, n, cols);
    }
  });
  if (!partials) return;
  for (auto [out, part] : {std::pair<T*, const std::vector<T>*>{dweight, &pw}, {dbias, &pb}}) {
    if (!out) continue;
    for (int64_t c = 0; c < cols; ++c) {
      double acc = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) acc += static_cast<double>((*part)[blk * cols + c]);
      out[c] = static_cast<T>(acc);
    }
  }
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

// layernorm.cpp - CPU layer norm forward (two-pass mean/variance per row) and backward, vectorized with
// Google Highway (compiled per instruction set, chosen at run time), rows split across the thread budget.
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
// Three passes over each row, nothing stored in between: the mean, the centred sum of squares, then
// y = (x - mean) * rstd * weight + bias.
template <class T>
void LayerNormForward(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t rows,
                      int64_t cols, double eps) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const T inv_cols = T(1) / static_cast<T>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T m = RowSum(xr, cols) * inv_cols;
    const auto vm = hn::Set(d, m);
    auto q0 = hn::Zero(d), q1 = hn::Zero(d);
    int64_t i = 0;
    for (; i + 2 * N <= cols; i += 2 * N) {
      const auto c0 = hn::Sub(hn::LoadU(d, xr + i), vm), c1 = hn::Sub(hn::LoadU(d, xr + i + N), vm);
      q0 = hn::MulAdd(c0, c0, q0);
      q1 = hn::MulAdd(c1, c1, q1);
    }
    for (; i + N <= cols; i += N) {
      const auto c = hn::Sub(hn::LoadU(d, xr + i), vm);
      q0 = hn::MulAdd(c, c, q0);
    }
    if (i < cols) {  // padded with m: adds 0
      const auto c = hn::Sub(LoadTail(d, xr + i, cols - i, m), vm);
      q1 = hn::MulAdd(c, c, q1);
    }
    const T var = ReduceSum(d, hn::Add(q0, q1)) * inv_cols;
    const T rs = static_cast<T>(1.0 / std::sqrt(static_cast<double>(var) + eps));
    const auto vrs = hn::Set(d, rs);
    MapTernary(d, xr, weight, bias, yr, cols, [vm, vrs](auto, auto v, auto w, auto b) HWY_ATTR {
      return hn::MulAdd(hn::Mul(hn::Sub(v, vm), vrs), w, b);
    });
    mean[r] = m;
    rstd[r] = rs;
  }
}

// Two passes over each row, nothing stored in between: xhat = (x - mean) rstd and g = dy * weight are formed
// in registers; the first pass accumulates sum(g), sum(g xhat) and the dweight / dbias rows, the second
// writes dx = rstd (g - mean(g) - xhat mean(g xhat)) recomputing xhat and g.
template <class T>
void LayerNormBackward(const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx,
                       T* dweight, T* dbias, int64_t rows, int64_t cols) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  if (dweight)
    for (int64_t c = 0; c < cols; ++c) dweight[c] = T(0);
  if (dbias)
    for (int64_t c = 0; c < cols; ++c) dbias[c] = T(0);
  const T inv_cols = T(1) / static_cast<T>(cols);
  const int64_t full = cols - cols % N, rest = cols - full;
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    const T m = mean[r];
    const auto vm = hn::Set(d, m), vrs = hn::Set(d, rstd[r]);
    auto sg = hn::Zero(d), sgx = hn::Zero(d);
    auto first = [&](auto vx, auto vdy, auto vw, T* dw, T* db, int64_t count) HWY_ATTR {
      const auto xh = hn::Mul(hn::Sub(vx, vm), vrs);
      const auto g = hn::Mul(vdy, vw);
      sg = hn::Add(sg, g);
      sgx = hn::MulAdd(g, xh, sgx);
      if (count == N) {
        if (dw) hn::StoreU(hn::MulAdd(vdy, xh, hn::LoadU(d, dw)), d, dw);
        if (db) hn::StoreU(hn::Add(hn::LoadU(d, db), vdy), d, db);
      } else {
        if (dw) StoreTail(d, hn::MulAdd(vdy, xh, LoadTail(d, dw, count, T(0))), dw, count);
        if (db) StoreTail(d, hn::Add(LoadTail(d, db, count, T(0)), vdy), db, count);
      }
    };
    for (int64_t i = 0; i < full; i += N)
      first(hn::LoadU(d, xr + i), hn::LoadU(d, dyr + i), hn::LoadU(d, weight + i),
            dweight ? dweight + i : nullptr, dbias ? dbias + i : nullptr, N);
    if (rest)  // padding: x = mean (xhat 0), dy = 0, weight = 0 add nothing
      first(LoadTail(d, xr + full, rest, m), LoadTail(d, dyr + full, rest, T(0)),
            LoadTail(d, weight + full, rest, T(0)), dweight ? dweight + full : nullptr,
            dbias ? dbias + full : nullptr, rest);
    if (!dx) continue;
    const auto mean_g = hn::Set(d, ReduceSum(d, sg) * inv_cols);
    const auto mean_gx = hn::Set(d, ReduceSum(d, sgx) * inv_cols);
    T* dxr = dx + r * cols;
    auto second = [&](auto vx, auto vdy, auto vw) HWY_ATTR {
      const auto xh = hn::Mul(hn::Sub(vx, vm), vrs);
      return hn::Mul(vrs, hn::NegMulAdd(xh, mean_gx, hn::Sub(hn::Mul(vdy, vw), mean_g)));
    };
    for (int64_t i = 0; i < full; i += N)
      hn::StoreU(second(hn::LoadU(d, xr + i), hn::LoadU(d, dyr + i), hn::LoadU(d, weight + i)), d, dxr + i);
    if (rest)
      StoreTail(d,
                second(LoadTail(d, xr + full, rest, m), LoadTail(d, dyr + full, rest, T(0)),
                       LoadTail(d, weight + full, rest, T(0))),
                dxr + full, rest);
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
      HWY_DYNAMIC_DISPATCH(LayerNormForwardF32)
      (x + o, weight, bias, y + o, mean + b, rstd + b, e - b, cols, eps);
    else
      HWY_DYNAMIC_DISPATCH(LayerNormForwardF64)
      (x + o, weight, bias, y + o, mean + b, rstd + b, e - b, cols, eps);
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
  const int64_t min_blocks =
      std::max<int64_t>(1, kParallelMinElements / std::max<int64_t>(kBlockRows * cols, 1));
  parallel_for(blocks, 1, min_blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t r0 = blk * kBlockRows, n = std::min(rows, r0 + kBlockRows) - r0, o = r0 * cols;
      T* dw = !dweight ? nullptr : partials ? pw.data() + blk * cols : dweight;
      T* db = !dbias ? nullptr : partials ? pb.data() + blk * cols : dbias;
      if constexpr (sizeof(T) == 4)
        HWY_DYNAMIC_DISPATCH(LayerNormBackwardF32)
        (dy + o, x + o, weight, mean + r0, rstd + r0, dx ? dx + o : nullptr, dw, db, n, cols);
      else
        HWY_DYNAMIC_DISPATCH(LayerNormBackwardF64)
        (dy + o, x + o, weight, mean + r0, rstd + r0, dx ? dx + o : nullptr, dw, db, n, cols);
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

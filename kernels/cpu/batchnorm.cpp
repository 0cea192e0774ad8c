// batchnorm.cpp - CPU batch normalization, vectorized with Google Highway (compiled per instruction set,
// chosen at run time) and split across the thread budget by channel (statistics, backward sums) or by
// (n, c) plane (the elementwise passes), so results do not depend on the thread count. Per-channel sums run
// in the input type over blocks of kBlock values and are folded into double per block (two passes for the
// variance: the mean first, then the squared deviations).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/batchnorm.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"
#include "kernels/cpu/simd-inl.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/batchnorm.h"
#include "kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
namespace {
constexpr int64_t kBlock = 256;

// Sum of x, sum of (x - m)^2 (when sq), and, with dy, sum of dy and of dy (x - m), over n values; each block
// of kBlock values summed in T lanes and added to the double totals.
template <class T>
void PlaneSums(const T* x, const T* dy, int64_t n, T m, bool sq, double* s0, double* s1) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vm = hn::Set(d, m);
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    auto a0 = hn::Zero(d), a1 = hn::Zero(d);
    int64_t i = b;
    auto step = [&](auto vx, auto vdy) HWY_ATTR {
      if (dy) {
        a0 = hn::Add(a0, vdy);
        a1 = hn::MulAdd(vdy, hn::Sub(vx, vm), a1);
      } else if (sq) {
        const auto c = hn::Sub(vx, vm);
        a1 = hn::MulAdd(c, c, a1);
      } else {
        a0 = hn::Add(a0, vx);
      }
    };
    for (; i + N <= e; i += N) step(hn::LoadU(d, x + i), dy ? hn::LoadU(d, dy + i) : hn::Zero(d));
    if (i < e) {  // padding with m (and dy 0) adds nothing to any of the sums... except the plain sum:
      const auto vx = LoadTail(d, x + i, e - i, dy || sq ? m : T(0));
      step(vx, dy ? LoadTail(d, dy + i, e - i, T(0)) : hn::Zero(d));
    }
    *s0 += static_cast<double>(ReduceSum(d, a0));
    *s1 += static_cast<double>(ReduceSum(d, a1));
  }
}

template <class T>
void StatsChannels(const T* x, int64_t batch, int64_t C, int64_t S, int64_t c0, int64_t c1, double* mean,
                   double* sq) {
  for (int64_t c = c0; c < c1; ++c) {
    double sum = 0, unused = 0;
    for (int64_t n = 0; n < batch; ++n)
      PlaneSums<T>(x + (n * C + c) * S, nullptr, S, T(0), false, &sum, &unused);
    const double m = sum / static_cast<double>(batch * S);
    double s = 0;
    for (int64_t n = 0; n < batch; ++n)
      PlaneSums<T>(x + (n * C + c) * S, nullptr, S, static_cast<T>(m), true, &unused, &s);
    // PlaneSums centred on m rounded to T: correct the squared deviations to the exact mean,
    // sum (x - m)^2 = sum (x - mt)^2 - count (m - mt)^2.
    const double dm = m - static_cast<double>(static_cast<T>(m));
    mean[c] = m;
    sq[c] = std::max(0.0, s - static_cast<double>(batch * S) * dm * dm);
  }
}

template <class T>
void BackwardSumsChannels(const T* dy, const T* x, const T* mean, int64_t batch, int64_t C, int64_t S,
                          int64_t c0, int64_t c1, double* sum_dy, double* sum_dy_xc) {
  for (int64_t c = c0; c < c1; ++c) {
    double a = 0, b = 0;
    for (int64_t n = 0; n < batch; ++n) {
      const int64_t o = (n * C + c) * S;
      PlaneSums<T>(x + o, dy + o, S, mean[c], false, &a, &b);
    }
    sum_dy[c] = a;
    sum_dy_xc[c] = b;
  }
}

// out = a * x + b over n values (one plane).
template <class T>
void AffinePlane(const T* x, T* y, int64_t n, T a, T b) {
  RowAffine(x, y, n, a, b);
}
// dx = scale * (dy - dy_shift - (x - m) * xc_coef) over one plane.
template <class T>
void BackwardPlane(const T* dy, const T* x, T* dx, int64_t n, T scale, T dy_shift, T m, T xc_coef) {
  const hn::ScalableTag<T> d;
  const auto vs = hn::Set(d, scale), vsh = hn::Set(d, dy_shift), vm = hn::Set(d, m), vc = hn::Set(d, xc_coef);
  MapBinary(d, dy, x, dx, n, [=](auto, auto vdy, auto vx) HWY_ATTR {
    return hn::Mul(vs, hn::NegMulAdd(hn::Sub(vx, vm), vc, hn::Sub(vdy, vsh)));
  });
}
}  // namespace

#define DDP_BN_ENTRY(T, S)                                                                                   \
  void StatsChannels##S(const T* x, int64_t batch, int64_t C, int64_t Sp, int64_t c0, int64_t c1,            \
                        double* mean, double* sq) {                                                          \
    StatsChannels(x, batch, C, Sp, c0, c1, mean, sq);                                                        \
  }                                                                                                          \
  void BackwardSumsChannels##S(const T* dy, const T* x, const T* mean, int64_t batch, int64_t C, int64_t Sp, \
                               int64_t c0, int64_t c1, double* a, double* b) {                               \
    BackwardSumsChannels(dy, x, mean, batch, C, Sp, c0, c1, a, b);                                           \
  }                                                                                                          \
  void AffinePlane##S(const T* x, T* y, int64_t n, T a, T b) { AffinePlane(x, y, n, a, b); }                 \
  void BackwardPlane##S(const T* dy, const T* x, T* dx, int64_t n, T scale, T sh, T m, T c) {                \
    BackwardPlane(dy, x, dx, n, scale, sh, m, c);                                                            \
  }
DDP_BN_ENTRY(float, F32)
DDP_BN_ENTRY(double, F64)
#undef DDP_BN_ENTRY
}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ddp::kernels::cpu {
HWY_EXPORT(StatsChannelsF32);
HWY_EXPORT(StatsChannelsF64);
HWY_EXPORT(BackwardSumsChannelsF32);
HWY_EXPORT(BackwardSumsChannelsF64);
HWY_EXPORT(AffinePlaneF32);
HWY_EXPORT(AffinePlaneF64);
HWY_EXPORT(BackwardPlaneF32);
HWY_EXPORT(BackwardPlaneF64);
namespace {
// Channels per thread at least: kParallelMinElements values.
int64_t min_channels(const BatchNormGeometry& g) {
  return std::max<int64_t>(1, kParallelMinElements / std::max<int64_t>(g.count(), 1));
}
int64_t min_planes(const BatchNormGeometry& g) {
  return std::max<int64_t>(1, kParallelMinElements / std::max<int64_t>(g.spatial, 1));
}
}  // namespace

template <class T>
void batch_norm_stats(const T* x, const BatchNormGeometry& g, double eps, double momentum, T* mean, T* invstd,
                      T* running_mean, T* running_var) {
  const int64_t C = g.channels;
  const double count = static_cast<double>(g.count());
  std::vector<double> m(static_cast<size_t>(C)), sq(static_cast<size_t>(C));
  parallel_for(C, 1, min_channels(g), [&](int64_t c0, int64_t c1) {
    if constexpr (sizeof(T) == 4)
      HWY_DYNAMIC_DISPATCH(StatsChannelsF32)(x, g.batch, C, g.spatial, c0, c1, m.data(), sq.data());
    else
      HWY_DYNAMIC_DISPATCH(StatsChannelsF64)(x, g.batch, C, g.spatial, c0, c1, m.data(), sq.data());
  });
  for (int64_t c = 0; c < C; ++c) {
    const double var = sq[c] / count;
    mean[c] = static_cast<T>(m[c]);
    invstd[c] = static_cast<T>(1.0 / std::sqrt(var + eps));
    if (running_mean) running_mean[c] = static_cast<T>((1 - momentum) * running_mean[c] + momentum * m[c]);
    if (running_var)
      running_var[c] = static_cast<T>((1 - momentum) * running_var[c] + momentum * sq[c] / (count - 1));
  }
}

template <class T>
void batch_norm_running_invstd(const T* running_var, int64_t channels, double eps, T* invstd) {
  for (int64_t c = 0; c < channels; ++c) invstd[c] = static_cast<T>(1.0 / std::sqrt(running_var[c] + eps));
}

template <class T>
void batch_norm_apply(const T* x, const T* mean, const T* invstd, const T* weight, const T* bias, T* y,
                      const BatchNormGeometry& g) {
  const int64_t C = g.channels, S = g.spatial;
  parallel_for(g.batch * C, 1, min_planes(g), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t c = p % C;
      const T scale = invstd[c] * (weight ? weight[c] : T(1));
      const T shift = (bias ? bias[c] : T(0)) - mean[c] * scale;  // y = x * scale + shift
      if constexpr (sizeof(T) == 4)
        HWY_DYNAMIC_DISPATCH(AffinePlaneF32)(x + p * S, y + p * S, S, scale, shift);
      else
        HWY_DYNAMIC_DISPATCH(AffinePlaneF64)(x + p * S, y + p * S, S, scale, shift);
    }
  });
}

template <class T>
void batch_norm_backward(const T* dy, const T* x, const T* mean, const T* invstd, const T* weight, T* dx,
                         T* dweight, T* dbias, const BatchNormGeometry& g, bool training) {
  const int64_t C = g.channels, S = g.spatial;
  const double count = static_cast<double>(g.count());
  std::vector<double> sum_dy(static_cast<size_t>(C)), sum_dy_xc(static_cast<size_t>(C));
  parallel_for(C, 1, min_channels(g), [&](int64_t c0, int64_t c1) {
    if constexpr (sizeof(T) == 4)
      HWY_DYNAMIC_DISPATCH(BackwardSumsChannelsF32)
      (dy, x, mean, g.batch, C, S, c0, c1, sum_dy.data(), sum_dy_xc.data());
    else
      HWY_DYNAMIC_DISPATCH(BackwardSumsChannelsF64)
      (dy, x, mean, g.batch, C, S, c0, c1, sum_dy.data(), sum_dy_xc.data());
  });
  std::vector<T> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C)), coef(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const double istd = invstd[c];
    const double sum_dy_xhat = sum_dy_xc[c] * istd;
    if (dbias) dbias[c] = static_cast<T>(sum_dy[c]);
    if (dweight) dweight[c] = static_cast<T>(sum_dy_xhat);
    const T w = weight ? weight[c] : T(1);
    // training: dx = w * invstd * (dy - mean(dy) - xhat * mean(dy * xhat))
    //              = scale * (dy - mean(dy) - (x - mean) * invstd * mean(dy * xhat))
    scale[c] = static_cast<T>(w * istd);
    shift[c] = training ? static_cast<T>(sum_dy[c] / count) : T(0);
    coef[c] = training ? static_cast<T>(istd * sum_dy_xhat / count) : T(0);
  }
  if (!dx) return;
  parallel_for(g.batch * C, 1, min_planes(g), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t c = p % C, o = p * S;
      if constexpr (sizeof(T) == 4)
        HWY_DYNAMIC_DISPATCH(BackwardPlaneF32)
        (dy + o, x + o, dx + o, S, scale[c], shift[c], mean[c], coef[c]);
      else
        HWY_DYNAMIC_DISPATCH(BackwardPlaneF64)
        (dy + o, x + o, dx + o, S, scale[c], shift[c], mean[c], coef[c]);
    }
  });
}

#define DDP_INSTANTIATE_BATCHNORM(T)                                                                     \
  template void batch_norm_stats<T>(const T*, const BatchNormGeometry&, double, double, T*, T*, T*, T*); \
  template void batch_norm_running_invstd<T>(const T*, int64_t, double, T*);                             \
  template void batch_norm_apply<T>(const T*, const T*, const T*, const T*, const T*, T*,                \
                                    const BatchNormGeometry&);                                           \
  template void batch_norm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*,     \
                                       const BatchNormGeometry&, bool);
DDP_INSTANTIATE_BATCHNORM(float)
DDP_INSTANTIATE_BATCHNORM(double)
#undef DDP_INSTANTIATE_BATCHNORM

}  // namespace ddp::kernels::cpu
#endif  // HWY_ONCE

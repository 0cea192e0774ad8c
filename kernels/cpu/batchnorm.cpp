// batchnorm.cpp - CPU batch normalization: per-channel sums accumulated in double (two passes for the
// variance), then elementwise passes over each contiguous (n, c) plane.
#include "kernels/cpu/batchnorm.h"

#include <cmath>
#include <vector>

namespace ddp::kernels::cpu {

template <class T>
void batch_norm_stats(const T* x, const BatchNormGeometry& g, double eps, double momentum, T* mean, T* invstd,
                      T* running_mean, T* running_var) {
  const int64_t C = g.channels, S = g.spatial;
  const double count = static_cast<double>(g.count());
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < g.batch; ++n) {
      const T* plane = x + (n * C + c) * S;
      for (int64_t i = 0; i < S; ++i) sum += plane[i];
    }
    const double m = sum / count;
    double sq = 0;
    for (int64_t n = 0; n < g.batch; ++n) {
      const T* plane = x + (n * C + c) * S;
      for (int64_t i = 0; i < S; ++i) {
        const double d = plane[i] - m;
        sq += d * d;
      }
    }
    const double var = sq / count;
    mean[c] = static_cast<T>(m);
    invstd[c] = static_cast<T>(1.0 / std::sqrt(var + eps));
    if (running_mean) running_mean[c] = static_cast<T>((1 - momentum) * running_mean[c] + momentum * m);
    if (running_var)
      running_var[c] = static_cast<T>((1 - momentum) * running_var[c] + momentum * sq / (count - 1));
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
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      const T scale = invstd[c] * (weight ? weight[c] : T(1));
      const T shift = (bias ? bias[c] : T(0)) - mean[c] * scale;  // y = x * scale + shift
      const T* in = x + (n * C + c) * S;
      T* out = y + (n * C + c) * S;
      for (int64_t i = 0; i < S; ++i) out[i] = in[i] * scale + shift;
    }
  }
}

template <class T>
void batch_norm_backward(const T* dy, const T* x, const T* mean, const T* invstd, const T* weight, T* dx,
                         T* dweight, T* dbias, const BatchNormGeometry& g, bool training) {
  const int64_t C = g.channels, S = g.spatial;
  const double count = static_cast<double>(g.count());
  for (int64_t c = 0; c < C; ++c) {
    // sum_dy = sum(dy), sum_dy_xhat = sum(dy * xhat) with xhat = (x - mean) * invstd
    double sum_dy = 0, sum_dy_xc = 0;
    const T m = mean[c];
    for (int64_t n = 0; n < g.batch; ++n) {
      const T* dyp = dy + (n * C + c) * S;
      const T* xp = x + (n * C + c) * S;
      T acc_dy = 0, acc_dy_xc = 0;
      for (int64_t i = 0; i < S; ++i) {
        acc_dy += dyp[i];
        acc_dy_xc += dyp[i] * (xp[i] - m);
      }
      sum_dy += acc_dy;
      sum_dy_xc += acc_dy_xc;
    }
    const double istd = invstd[c];
    const double sum_dy_xhat = sum_dy_xc * istd;
    if (dbias) dbias[c] = static_cast<T>(sum_dy);
    if (dweight) dweight[c] = static_cast<T>(sum_dy_xhat);
    if (!dx) continue;
    const T w = weight ? weight[c] : T(1);
    const T scale = static_cast<T>(w * istd);
    // training: dx = w * invstd * (dy - mean(dy) - xhat * mean(dy * xhat))
    //              = scale * dy - scale * mean(dy) - (x - mean) * scale * invstd * mean(dy * xhat)
    const T dy_shift = training ? static_cast<T>(sum_dy / count) : T(0);
    const T xc_coef = training ? static_cast<T>(istd * sum_dy_xhat / count) : T(0);
    for (int64_t n = 0; n < g.batch; ++n) {
      const T* dyp = dy + (n * C + c) * S;
      const T* xp = x + (n * C + c) * S;
      T* dxp = dx + (n * C + c) * S;
      for (int64_t i = 0; i < S; ++i) dxp[i] = scale * (dyp[i] - dy_shift - (xp[i] - m) * xc_coef);
    }
  }
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

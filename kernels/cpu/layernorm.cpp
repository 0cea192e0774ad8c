// layernorm.cpp - CPU layer norm forward (two-pass mean/variance per row) and backward.
#include "kernels/cpu/layernorm.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/softmax.h"

namespace ddp::kernels::cpu {

template <class T>
void layernorm_forward(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t rows,
                       int64_t cols, double eps) {
  const T inv_cols = T(1) / static_cast<T>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T m = row_sum(xr, cols) * inv_cols;
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] - m;  // centred values, reused below
    const T var = row_dot(yr, yr, cols) * inv_cols;
    const T rs = static_cast<T>(1.0 / std::sqrt(static_cast<double>(var) + eps));
    for (int64_t c = 0; c < cols; ++c) yr[c] = yr[c] * rs * weight[c] + bias[c];
    mean[r] = m;
    rstd[r] = rs;
  }
}

template <class T>
void layernorm_backward(const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx,
                        T* dweight, T* dbias, int64_t rows, int64_t cols) {
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
    for (int64_t c = 0; c < cols; ++c) xhat[c] = (xr[c] - m) * rs;
    if (dweight)
      for (int64_t c = 0; c < cols; ++c) dweight[c] += dyr[c] * xhat[c];
    if (dbias)
      for (int64_t c = 0; c < cols; ++c) dbias[c] += dyr[c];
    if (!dx) continue;
    for (int64_t c = 0; c < cols; ++c) g[c] = dyr[c] * weight[c];
    const T mean_g = row_sum(g.data(), cols) * inv_cols;
    const T mean_gx = row_dot(g.data(), xhat.data(), cols) * inv_cols;
    T* dxr = dx + r * cols;
    for (int64_t c = 0; c < cols; ++c) dxr[c] = rs * (g[c] - mean_g - xhat[c] * mean_gx);
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

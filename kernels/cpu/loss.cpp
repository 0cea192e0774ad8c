// loss.cpp - CPU cross-entropy (fused, one pass per row over the logits) and MSE, forward and backward.
#include "kernels/cpu/loss.h"

#include <cmath>

#include "kernels/cpu/softmax.h"

namespace ddp::kernels::cpu {

int64_t first_bad_target(const int64_t* targets, int64_t rows, int64_t cols, bool has_ignore,
                         int64_t ignore_index) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = targets[r];
    if ((t < 0 || t >= cols) && !(has_ignore && t == ignore_index)) return r;
  }
  return -1;
}

template <class T>
double cross_entropy_forward(const T* logits, const int64_t* targets, int64_t rows, int64_t cols,
                             bool has_ignore, int64_t ignore_index, T* lse, int64_t* count) {
  double total = 0;
  int64_t n = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = logits + r * cols;
    const T m = row_max(xr, cols);
    T s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(xr[c] - m);
    lse[r] = m + std::log(s);
    const int64_t t = targets[r];
    if (has_ignore && t == ignore_index) continue;
    total += static_cast<double>(lse[r]) - static_cast<double>(xr[t]);
    ++n;
  }
  *count = n;
  return total;
}

template <class T>
void cross_entropy_backward(const T* logits, const int64_t* targets, const T* lse, const T* dloss,
                            double divisor, int64_t rows, int64_t cols, bool has_ignore, int64_t ignore_index,
                            T* dlogits) {
  const T scale = static_cast<T>(static_cast<double>(dloss[0]) / divisor);
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = logits + r * cols;
    T* dr = dlogits + r * cols;
    const int64_t t = targets[r];
    if (has_ignore && t == ignore_index) {
      for (int64_t c = 0; c < cols; ++c) dr[c] = T(0);
      continue;
    }
    const T l = lse[r];
    for (int64_t c = 0; c < cols; ++c) dr[c] = scale * std::exp(xr[c] - l);
    dr[t] -= scale;
  }
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

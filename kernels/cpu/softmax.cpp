// softmax.cpp - CPU softmax / log-softmax forward and backward, one row at a time (rows are independent).
#include "kernels/cpu/softmax.h"

#include <cmath>

namespace ddp::kernels::cpu {

template <class T>
void softmax_forward(const T* x, T* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T m = row_max(xr, cols);
    for (int64_t c = 0; c < cols; ++c) yr[c] = std::exp(xr[c] - m);
    const T inv = T(1) / row_sum(yr, cols);
    for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
  }
}

template <class T>
void log_softmax_forward(const T* x, T* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T m = row_max(xr, cols);
    T s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(xr[c] - m);
    const T shift = m + std::log(s);
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] - shift;
  }
}

template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    const T s = row_dot(yr, dyr, cols);
    for (int64_t c = 0; c < cols; ++c) dxr[c] = yr[c] * (dyr[c] - s);
  }
}

template <class T>
void log_softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    const T s = row_sum(dyr, cols);
    for (int64_t c = 0; c < cols; ++c) dxr[c] = dyr[c] - std::exp(yr[c]) * s;
  }
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

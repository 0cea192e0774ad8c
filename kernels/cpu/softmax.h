// softmax.h - CPU kernels for softmax and log-softmax over the last dimension of a (rows, cols) block, and
// the row reductions (sum, dot, max) that the softmax-family kernels (loss, layernorm, attention) share.
// Numerically stable: every row subtracts its max before exp.
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {

// ---- row reductions: 8 independent accumulators so the compiler can vectorize without -ffast-math ----
template <class T>
inline T row_sum(const T* x, int64_t n) {
  T acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += x[i + l];
  T s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += x[i];
  return s;
}
template <class T>
inline T row_dot(const T* x, const T* y, int64_t n) {
  T acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += x[i + l] * y[i + l];
  T s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}
template <class T>
inline T row_max(const T* x, int64_t n) {
  T m = x[0];
  for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// ---- launchers ----
// y = softmax(x) row by row.  x, y: (rows, cols); y may alias x.
template <class T>
void softmax_forward(const T* x, T* y, int64_t rows, int64_t cols);
// y = log_softmax(x) row by row.  x, y: (rows, cols); y may alias x.
template <class T>
void log_softmax_forward(const T* x, T* y, int64_t rows, int64_t cols);
// dx = y * (dy - sum(dy * y)) with y the saved softmax output.  all (rows, cols).
template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols);
// dx = dy - exp(y) * sum(dy) with y the saved log-softmax output.  all (rows, cols).
template <class T>
void log_softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols);

}  // namespace ddp::kernels::cpu

// activation.cpp - the CPU activation kernels. GELU and sigmoid in float32 use a branch-free exp written so
// that the compiler vectorises the loops (glibc's expf/tanhf are scalar calls); float64 uses <cmath>.
//
// GELU is computed in its sigmoid form: 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi)(x + 0.044715
// x^3), which needs one exp and has no cancellation for large negative x.
//
// GCC keeps the clamps in exp_vec below as branches (and so does not vectorise) unless it may assume that FP
// comparisons do not trap; nothing here reads FP exception flags, so that is safe.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "kernels/cpu/activation.h"

#include <bit>
#include <cmath>
#include <cstdint>

namespace ddp::kernels::cpu {
namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

// exp(x) for float in about 2 ulp, branch-free: x = k ln2 + r, |r| <= ln2/2, exp(r) by a degree-7 polynomial.
inline float exp_vec(float x) {
  x = x > 88.0f ? 88.0f : x;
  x = x < -87.0f ? -87.0f : x;
  const float t = x * 1.44269504088896341f;
  const float kf = (t + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23 trick)
  const float r = (x - kf * 0.693145751953125f) - kf * 1.428606765330187e-06f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t k = static_cast<int32_t>(kf);
  return p * std::bit_cast<float>((k + 127) << 23);
}
inline double exp_vec(double x) { return std::exp(x); }

template <class T>
inline T sigmoid_of(T x) {
  return T(1) / (T(1) + exp_vec(-x));
}
}  // namespace

template <class T>
void relu_forward(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
}
template <class T>
void relu_backward(const T* g, const T* x, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T gi = g[i];  // loaded unconditionally so the select vectorises
    dx[i] = x[i] > T(0) ? gi : T(0);
  }
}

template <class T>
void gelu_forward(const T* x, T* y, int64_t n) {
  const T c = static_cast<T>(2 * kSqrt2OverPi), c3 = static_cast<T>(2 * kSqrt2OverPi * kGeluCubic);
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    y[i] = v * sigmoid_of(v * (c + c3 * v * v));  // sigmoid(2u)
  }
}
template <class T>
void gelu_backward(const T* g, const T* x, T* dx, int64_t n) {
  const T c = static_cast<T>(2 * kSqrt2OverPi), c3 = static_cast<T>(2 * kSqrt2OverPi * kGeluCubic);
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i], v2 = v * v;
    const T s = sigmoid_of(v * (c + c3 * v2));
    // d/dx [x s(2u)] = s + x s (1 - s) d(2u)/dx, d(2u)/dx = c + 3 c3 x^2
    dx[i] = g[i] * (s + v * s * (T(1) - s) * (c + T(3) * c3 * v2));
  }
}

template <class T>
void tanh_forward(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}
template <class T>
void tanh_backward(const T* g, const T* y, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = g[i] * (T(1) - y[i] * y[i]);
}

template <class T>
void sigmoid_forward(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = sigmoid_of(x[i]);
}
template <class T>
void sigmoid_backward(const T* g, const T* y, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = g[i] * y[i] * (T(1) - y[i]);
}

template <class T>
void exp_forward(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}
template <class T>
void exp_backward(const T* g, const T* y, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = g[i] * y[i];
}

template <class T>
void log_forward(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::log(x[i]);
}
template <class T>
void log_backward(const T* g, const T* x, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = g[i] / x[i];
}

#define DDP_INSTANTIATE_ACTIVATION(T)                                 \
  template void relu_forward<T>(const T*, T*, int64_t);               \
  template void relu_backward<T>(const T*, const T*, T*, int64_t);    \
  template void gelu_forward<T>(const T*, T*, int64_t);               \
  template void gelu_backward<T>(const T*, const T*, T*, int64_t);    \
  template void tanh_forward<T>(const T*, T*, int64_t);               \
  template void tanh_backward<T>(const T*, const T*, T*, int64_t);    \
  template void sigmoid_forward<T>(const T*, T*, int64_t);            \
  template void sigmoid_backward<T>(const T*, const T*, T*, int64_t); \
  template void exp_forward<T>(const T*, T*, int64_t);                \
  template void exp_backward<T>(const T*, const T*, T*, int64_t);     \
  template void log_forward<T>(const T*, T*, int64_t);                \
  template void log_backward<T>(const T*, const T*, T*, int64_t);
DDP_INSTANTIATE_ACTIVATION(float)
DDP_INSTANTIATE_ACTIVATION(double)
#undef DDP_INSTANTIATE_ACTIVATION

}  // namespace ddp::kernels::cpu

// activation.h - pointwise activations and their derivatives on the CPU (float32 and float64 over raw arrays
// of n elements). Backward kernels take whichever of x (input) or y (output) gives the cheapest derivative.
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {

// y = max(x, 0); dx = g * (x > 0)
template <class T>
void relu_forward(const T* x, T* y, int64_t n);
template <class T>
void relu_backward(const T* g, const T* x, T* dx, int64_t n);
// GPT-2's tanh approximation: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); dx from x.
template <class T>
void gelu_forward(const T* x, T* y, int64_t n);
template <class T>
void gelu_backward(const T* g, const T* x, T* dx, int64_t n);
// y = tanh(x); dx = g (1 - y^2)
template <class T>
void tanh_forward(const T* x, T* y, int64_t n);
template <class T>
void tanh_backward(const T* g, const T* y, T* dx, int64_t n);
// y = 1 / (1 + exp(-x)); dx = g y (1 - y)
template <class T>
void sigmoid_forward(const T* x, T* y, int64_t n);
template <class T>
void sigmoid_backward(const T* g, const T* y, T* dx, int64_t n);
// y = exp(x); dx = g y
template <class T>
void exp_forward(const T* x, T* y, int64_t n);
template <class T>
void exp_backward(const T* g, const T* y, T* dx, int64_t n);
// y = log(x); dx = g / x
template <class T>
void log_forward(const T* x, T* y, int64_t n);
template <class T>
void log_backward(const T* g, const T* x, T* dx, int64_t n);

}  // namespace ddp::kernels::cpu

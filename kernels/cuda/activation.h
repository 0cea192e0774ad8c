// activation.h - pointwise activations and their derivatives on the GPU; same names and arguments as
// kernels/cpu/activation.h (float and double), launched on ddp::cuda::current_stream().
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace ddp::kernels::cuda {

template <class T>
void relu_forward(const T* x, T* y, int64_t n);
template <class T>
void relu_backward(const T* g, const T* x, T* dx, int64_t n);
template <class T>
void gelu_forward(const T* x, T* y, int64_t n);
template <class T>
void gelu_backward(const T* g, const T* x, T* dx, int64_t n);
template <class T>
void tanh_forward(const T* x, T* y, int64_t n);
template <class T>
void tanh_backward(const T* g, const T* y, T* dx, int64_t n);
template <class T>
void sigmoid_forward(const T* x, T* y, int64_t n);
template <class T>
void sigmoid_backward(const T* g, const T* y, T* dx, int64_t n);
template <class T>
void exp_forward(const T* x, T* y, int64_t n);
template <class T>
void exp_backward(const T* g, const T* y, T* dx, int64_t n);
template <class T>
void log_forward(const T* x, T* y, int64_t n);
template <class T>
void log_backward(const T* g, const T* x, T* dx, int64_t n);

}  // namespace ddp::kernels::cuda

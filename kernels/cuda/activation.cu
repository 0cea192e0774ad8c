// activation.cu - grid-stride kernels for the activations: one functor per formula, one launcher template.
// GELU uses the same sigmoid form as the CPU kernel: 0.5 x (1 + tanh(u)) = x * sigmoid(2u). Every kernel
// moves 16 bytes per access where the pointers allow (vector_access.cuh), with the same per-element functor.
#include "kernels/cuda/activation.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/vector_access.cuh"
#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

__device__ inline float exp_fast(float x) { return __expf(fminf(x, 88.0f)); }
__device__ inline double exp_fast(double x) { return ::exp(x); }
template <class T>
__device__ inline T sigmoid_of(T x) {
  return T(1) / (T(1) + exp_fast(-x));
}
__device__ inline float tanh_of(float x) { return tanhf(x); }
__device__ inline double tanh_of(double x) { return ::tanh(x); }
__device__ inline float log_of(float x) { return logf(x); }
__device__ inline double log_of(double x) { return ::log(x); }
__device__ inline float exp_exact(float x) { return expf(x); }
__device__ inline double exp_exact(double x) { return ::exp(x); }

// y = F(x)
template <class T, class F>
void launch_unary(const T* x, T* y, int64_t n, F f) {
  map_elements(n, ddp::cuda::current_stream(), f, y, x);
}
// dx = F(g, saved)
template <class T, class F>
void launch_grad(const T* g, const T* s, T* dx, int64_t n, F f) {
  map_elements(n, ddp::cuda::current_stream(), f, dx, g, s);
}

template <class T>
struct Relu {
  __device__ T operator()(T v) const { return v > T(0) ? v : T(0); }
};
template <class T>
struct ReluGrad {
  __device__ T operator()(T g, T x) const { return x > T(0) ? g : T(0); }
};
template <class T>
struct Gelu {
  __device__ T operator()(T v) const {
    const T c = T(2 * kSqrt2OverPi), c3 = T(2 * kSqrt2OverPi * kGeluCubic);
    return v * sigmoid_of(v * (c + c3 * v * v));
  }
};
template <class T>
struct GeluGrad {
  __device__ T operator()(T g, T v) const {
    const T c = T(2 * kSqrt2OverPi), c3 = T(2 * kSqrt2OverPi * kGeluCubic);
    const T v2 = v * v, s = sigmoid_of(v * (c + c3 * v2));
    return g * (s + v * s * (T(1) - s) * (c + T(3) * c3 * v2));
  }
};
template <class T>
struct Tanh {
  __device__ T operator()(T v) const { return tanh_of(v); }
};
template <class T>
struct TanhGrad {
  __device__ T operator()(T g, T y) const { return g * (T(1) - y * y); }
};
template <class T>
struct Sigmoid {
  __device__ T operator()(T v) const { return sigmoid_of(v); }
};
template <class T>
struct SigmoidGrad {
  __device__ T operator()(T g, T y) const { return g * y * (T(1) - y); }
};
template <class T>
struct Exp {
  __device__ T operator()(T v) const { return exp_exact(v); }
};
template <class T>
struct ExpGrad {
  __device__ T operator()(T g, T y) const { return g * y; }
};
template <class T>
struct Log {
  __device__ T operator()(T v) const { return log_of(v); }
};
template <class T>
struct LogGrad {
  __device__ T operator()(T g, T x) const { return g / x; }
};
}  // namespace

template <class T>
void relu_forward(const T* x, T* y, int64_t n) {
  launch_unary(x, y, n, Relu<T>{});
}
template <class T>
void relu_backward(const T* g, const T* x, T* dx, int64_t n) {
  launch_grad(g, x, dx, n, ReluGrad<T>{});
}
template <class T>
void gelu_forward(const T* x, T* y, int64_t n) {
  launch_unary(x, y, n, Gelu<T>{});
}
template <class T>
void gelu_backward(const T* g, const T* x, T* dx, int64_t n) {
  launch_grad(g, x, dx, n, GeluGrad<T>{});
}
template <class T>
void tanh_forward(const T* x, T* y, int64_t n) {
  launch_unary(x, y, n, Tanh<T>{});
}
template <class T>
void tanh_backward(const T* g, const T* y, T* dx, int64_t n) {
  launch_grad(g, y, dx, n, TanhGrad<T>{});
}
template <class T>
void sigmoid_forward(const T* x, T* y, int64_t n) {
  launch_unary(x, y, n, Sigmoid<T>{});
}
template <class T>
void sigmoid_backward(const T* g, const T* y, T* dx, int64_t n) {
  launch_grad(g, y, dx, n, SigmoidGrad<T>{});
}
template <class T>
void exp_forward(const T* x, T* y, int64_t n) {
  launch_unary(x, y, n, Exp<T>{});
}
template <class T>
void exp_backward(const T* g, const T* y, T* dx, int64_t n) {
  launch_grad(g, y, dx, n, ExpGrad<T>{});
}
template <class T>
void log_forward(const T* x, T* y, int64_t n) {
  launch_unary(x, y, n, Log<T>{});
}
template <class T>
void log_backward(const T* g, const T* x, T* dx, int64_t n) {
  launch_grad(g, x, dx, n, LogGrad<T>{});
}

#define DDP_INSTANTIATE_CUDA_ACTIVATION(T)                            \
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
DDP_INSTANTIATE_CUDA_ACTIVATION(float)
DDP_INSTANTIATE_CUDA_ACTIVATION(double)
#undef DDP_INSTANTIATE_CUDA_ACTIVATION

}  // namespace ddp::kernels::cuda

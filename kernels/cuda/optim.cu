// optim.cu - SGD and AdamW updates, the same arithmetic as runtime/optim/optimizer.cpp's CPU loops.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/optim.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
template <class T>
__global__ void sgd_kernel(T* w, const T* g, T* buf, int64_t n, T lr, T mom, T damp, T wd, bool nesterov,
                           bool first) {
  DDP_CUDA_KERNEL_LOOP(j, n) {
    T d = g[j];
    if (wd != T(0)) d += wd * w[j];
    if (buf) {
      buf[j] = first ? d : mom * buf[j] + (T(1) - damp) * d;
      d = nesterov ? d + mom * buf[j] : buf[j];
    }
    w[j] -= lr * d;
  }
}
template <class T>
__global__ void adamw_kernel(T* w, const T* g, T* m, T* v, int64_t n, T b1, T b2, T eps, T decay, T step_size,
                             T sqrt_bc2) {
  DDP_CUDA_KERNEL_LOOP(j, n) {
    w[j] *= decay;
    m[j] = b1 * m[j] + (T(1) - b1) * g[j];
    v[j] = b2 * v[j] + (T(1) - b2) * g[j] * g[j];
    w[j] -= step_size * m[j] / (sqrt(v[j]) / sqrt_bc2 + eps);
  }
}
}  // namespace

void sgd_step(void* param, const void* grad, void* momentum, DType dtype, int64_t n, double lr, double mom,
              double damp, double wd, bool nesterov, bool first, cudaStream_t stream) {
  if (n == 0) return;
  if (dtype == DType::F32) {
    sgd_kernel<float><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<float*>(param), static_cast<const float*>(grad), static_cast<float*>(momentum), n,
        float(lr), float(mom), float(damp), float(wd), nesterov, first);
  } else if (dtype == DType::F64) {
    sgd_kernel<double><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<double*>(param), static_cast<const double*>(grad), static_cast<double*>(momentum), n, lr,
        mom, damp, wd, nesterov, first);
  } else {
    DDP_FAIL("SGD on CUDA: dtype ", dtype_name(dtype), " not supported");
  }
  DDP_CUDA_CHECK_LAUNCH();
}

void adamw_step(void* param, const void* grad, void* m, void* v, DType dtype, int64_t n, double lr, double b1,
                double b2, double eps, double wd, double bc1, double bc2, cudaStream_t stream) {
  if (n == 0) return;
  const double decay = 1 - lr * wd, step_size = lr / bc1, sqrt_bc2 = std::sqrt(bc2);
  if (dtype == DType::F32) {
    adamw_kernel<float><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<float*>(param), static_cast<const float*>(grad), static_cast<float*>(m),
        static_cast<float*>(v), n, float(b1), float(b2), float(eps), float(decay), float(step_size),
        float(sqrt_bc2));
  } else if (dtype == DType::F64) {
    adamw_kernel<double><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<double*>(param), static_cast<const double*>(grad), static_cast<double*>(m),
        static_cast<double*>(v), n, b1, b2, eps, decay, step_size, sqrt_bc2);
  } else {
    DDP_FAIL("AdamW on CUDA: dtype ", dtype_name(dtype), " not supported");
  }
  DDP_CUDA_CHECK_LAUNCH();
}
}  // namespace ddp::kernels::cuda

// optim.cu - SGD and AdamW updates, the same arithmetic as kernels/cpu/optim.cpp's fused loops. Every scalar
// constant (1 - beta1, 1 - beta2, 1 - dampening, 1 - lr * wd, lr / bias_correction1, sqrt(bias_correction2))
// is formed in double on the host and rounded once to T, as the CPU kernels and PyTorch do: 1 - 0.999f in
// float is 9.9998713e-4, not 1e-3, which biased every float32 second moment by 1.3e-5 relative.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/optim.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
template <class T>
__global__ void sgd_kernel(T* w, const T* g, T* buf, int64_t n, T lr, T mom, T one_minus_damp, T wd,
                           bool nesterov, bool first) {
  DDP_CUDA_KERNEL_LOOP(j, n) {
    T d = g[j];
    if (wd != T(0)) d += wd * w[j];
    if (buf) {
      buf[j] = first ? d : mom * buf[j] + one_minus_damp * d;
      d = nesterov ? d + mom * buf[j] : buf[j];
    }
    w[j] -= lr * d;
  }
}
template <class T>
__global__ void adamw_kernel(T* w, const T* g, T* m, T* v, int64_t n, T b1, T one_minus_b1, T b2,
                             T one_minus_b2, T eps, T decay, T step_size, T sqrt_bc2) {
  DDP_CUDA_KERNEL_LOOP(j, n) {
    w[j] *= decay;
    m[j] = b1 * m[j] + one_minus_b1 * g[j];
    v[j] = b2 * v[j] + one_minus_b2 * g[j] * g[j];
    w[j] -= step_size * m[j] / (sqrt(v[j]) / sqrt_bc2 + eps);
  }
}
}  // namespace

void sgd_step(void* param, const void* grad, void* momentum, DType dtype, int64_t n, double lr, double mom,
              double damp, double wd, bool nesterov, bool first, cudaStream_t stream) {
  if (n == 0) return;
  const double one_minus_damp = 1.0 - damp;  // in double, rounded once below
  if (dtype == DType::F32) {
    sgd_kernel<float><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<float*>(param), static_cast<const float*>(grad), static_cast<float*>(momentum), n,
        float(lr), float(mom), float(one_minus_damp), float(wd), nesterov, first);
  } else if (dtype == DType::F64) {
    sgd_kernel<double><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<double*>(param), static_cast<const double*>(grad), static_cast<double*>(momentum), n, lr,
        mom, one_minus_damp, wd, nesterov, first);
  } else {
    DDP_FAIL("SGD on CUDA: dtype ", dtype_name(dtype), " not supported");
  }
  DDP_CUDA_CHECK_LAUNCH();
}

void adamw_step(void* param, const void* grad, void* m, void* v, DType dtype, int64_t n, double lr, double b1,
                double b2, double eps, double wd, double bc1, double bc2, cudaStream_t stream) {
  if (n == 0) return;
  // All in double; each rounded once to the parameter's dtype at the launch.
  const double one_minus_b1 = 1.0 - b1, one_minus_b2 = 1.0 - b2;
  const double decay = 1.0 - lr * wd, step_size = lr / bc1, sqrt_bc2 = std::sqrt(bc2);
  if (dtype == DType::F32) {
    adamw_kernel<float><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<float*>(param), static_cast<const float*>(grad), static_cast<float*>(m),
        static_cast<float*>(v), n, float(b1), float(one_minus_b1), float(b2), float(one_minus_b2), float(eps),
        float(decay), float(step_size), float(sqrt_bc2));
  } else if (dtype == DType::F64) {
    adamw_kernel<double><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<double*>(param), static_cast<const double*>(grad), static_cast<double*>(m),
        static_cast<double*>(v), n, b1, one_minus_b1, b2, one_minus_b2, eps, decay, step_size, sqrt_bc2);
  } else {
    DDP_FAIL("AdamW on CUDA: dtype ", dtype_name(dtype), " not supported");
  }
  DDP_CUDA_CHECK_LAUNCH();
}
}  // namespace ddp::kernels::cuda

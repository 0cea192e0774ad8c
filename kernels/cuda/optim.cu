// optim.cu - SGD and AdamW updates of one tensor per launch (a whole list at once: multi_tensor.cu). The
// per-element arithmetic is kernels/cpu/optim_math.h's, shared with the multi-tensor kernels and written
// operation for operation as kernels/cpu/optim.cpp's vector loop (fused multiply-adds where it has MulAdd),
// so the CPU and CUDA steps agree bit for bit. Every scalar constant (1 - beta1, 1 - beta2, 1 - dampening, 1
// - lr * wd, lr / bias_correction1, sqrt(bias_correction2)) is formed in double on the host and rounded once
// to T, as the CPU kernels and PyTorch do: 1 - 0.999f in float is 9.9998713e-4, not 1e-3, which biased every
// float32 second moment by 1.3e-5 relative.
#include "kernels/cpu/optim_math.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/optim.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
template <class T>
__global__ void sgd_kernel(T* w, const T* g, T* buf, int64_t n, cpu::SgdConstants<T> c, bool first) {
  const bool has_buf = buf != nullptr;
  DDP_CUDA_KERNEL_LOOP(j, n) {
    T b = has_buf && !first ? buf[j] : T(0);
    w[j] = cpu::sgd_update(w[j], g[j], b, has_buf, first, c);
    if (has_buf) buf[j] = b;
  }
}
template <class T>
__global__ void adamw_kernel(T* w, const T* g, T* m, T* v, int64_t n, cpu::AdamWConstants<T> c,
                             cpu::AdamWBiasCorrection<T> bc) {
  DDP_CUDA_KERNEL_LOOP(j, n) {
    T mj = m[j], vj = v[j];
    w[j] = cpu::adamw_update(w[j], g[j], mj, vj, c, bc);
    m[j] = mj;
    v[j] = vj;
  }
}
}  // namespace

void sgd_step(void* param, const void* grad, void* momentum, DType dtype, int64_t n, double lr, double mom,
              double damp, double wd, bool nesterov, bool first, cudaStream_t stream) {
  if (n == 0) return;
  if (mom == 0) momentum = nullptr;  // as the CPU kernel: no buffer without momentum
  if (dtype == DType::F32) {
    sgd_kernel<float><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<float*>(param), static_cast<const float*>(grad), static_cast<float*>(momentum), n,
        cpu::sgd_constants<float>(lr, mom, damp, wd, nesterov), first);
  } else if (dtype == DType::F64) {
    sgd_kernel<double><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<double*>(param), static_cast<const double*>(grad), static_cast<double*>(momentum), n,
        cpu::sgd_constants<double>(lr, mom, damp, wd, nesterov), first);
  } else {
    DDP_FAIL("SGD on CUDA: dtype ", dtype_name(dtype), " not supported (float32 or float64)");
  }
  DDP_CUDA_CHECK_LAUNCH();
}

void adamw_step(void* param, const void* grad, void* m, void* v, DType dtype, int64_t n, double lr, double b1,
                double b2, double eps, double wd, double bc1, double bc2, cudaStream_t stream) {
  if (n == 0) return;
  if (dtype == DType::F32) {
    adamw_kernel<float><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<float*>(param), static_cast<const float*>(grad), static_cast<float*>(m),
        static_cast<float*>(v), n, cpu::adamw_constants<float>(lr, b1, b2, eps, wd),
        cpu::adamw_bias_correction<float>(lr, bc1, bc2));
  } else if (dtype == DType::F64) {
    adamw_kernel<double><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<double*>(param), static_cast<const double*>(grad), static_cast<double*>(m),
        static_cast<double*>(v), n, cpu::adamw_constants<double>(lr, b1, b2, eps, wd),
        cpu::adamw_bias_correction<double>(lr, bc1, bc2));
  } else {
    DDP_FAIL("AdamW on CUDA: dtype ", dtype_name(dtype), " not supported (float32 or float64)");
  }
  DDP_CUDA_CHECK_LAUNCH();
}
}  // namespace ddp::kernels::cuda

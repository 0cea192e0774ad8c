// optim.cu - SGD and AdamW updates of one tensor per launch (a whole list at once: multi_tensor.cu). The
// per-element arithmetic is kernels/cpu/optim_math.h's, shared with the multi-tensor kernels and written
// operation for operation as kernels/cpu/optim.cpp's vector loop (fused multiply-adds where it has MulAdd),
// so the CPU and CUDA steps agree bit for bit. Every scalar constant (1 - beta1, 1 - beta2, 1 - dampening, 1
// - lr * wd, lr / bias_correction1, sqrt(bias_correction2)) is formed in double on the host and rounded once
// to T, as the CPU kernels and PyTorch do: 1 - 0.999f in float is 9.9998713e-4, not 1e-3, which biased every
// float32 second moment by 1.3e-5 relative. Each kernel moves 16 bytes per access of every tensor where the
// pointers allow (vector_access.cuh), with the same per-element update.
#include "kernels/cuda/optim.h"
#include "kernels/cuda/optim_step.cuh"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
template <class Index, class Step>
__global__ void step_kernel(VectorPlan p, Step s) {
  run_step<Index>(p, s, thread_position<Index>(), thread_count<Index>());
}
// The whole tensor: one plan, a grid-stride loop over it (32-bit index math when n allows).
template <class Step>
void launch_step(const Step& s, int64_t n, cudaStream_t stream) {
  const VectorPlan p = s.plan(n);
  launch_planned(
      p, [&](auto index, int grid) { step_kernel<decltype(index)><<<grid, kBlock, 0, stream>>>(p, s); });
  DDP_CUDA_CHECK_LAUNCH();
}

template <class T>
void sgd(T* w, const T* g, T* buf, int64_t n, cpu::SgdConstants<T> c, bool first, cudaStream_t stream) {
  launch_step(SgdStep<T>{w, g, buf, c, first}, n, stream);
}
template <class T>
void adamw(T* w, const T* g, T* m, T* v, int64_t n, cpu::AdamWConstants<T> c, cpu::AdamWBiasCorrection<T> bc,
           cudaStream_t stream) {
  launch_step(AdamWStep<T>{w, m, v, g, c, bc}, n, stream);
}
}  // namespace

void sgd_step(void* param, const void* grad, void* momentum, DType dtype, int64_t n, double lr, double mom,
              double damp, double wd, bool nesterov, bool first, cudaStream_t stream) {
  if (n == 0) return;
  if (mom == 0) momentum = nullptr;  // as the CPU kernel: no buffer without momentum
  if (dtype == DType::F32) {
    sgd(static_cast<float*>(param), static_cast<const float*>(grad), static_cast<float*>(momentum), n,
        cpu::sgd_constants<float>(lr, mom, damp, wd, nesterov), first, stream);
  } else if (dtype == DType::F64) {
    sgd(static_cast<double*>(param), static_cast<const double*>(grad), static_cast<double*>(momentum), n,
        cpu::sgd_constants<double>(lr, mom, damp, wd, nesterov), first, stream);
  } else {
    DDP_FAIL("SGD on CUDA: dtype ", dtype_name(dtype), " not supported (float32 or float64)");
  }
}

void adamw_step(void* param, const void* grad, void* m, void* v, DType dtype, int64_t n, double lr, double b1,
                double b2, double eps, double wd, double bc1, double bc2, cudaStream_t stream) {
  if (n == 0) return;
  if (dtype == DType::F32) {
    adamw(static_cast<float*>(param), static_cast<const float*>(grad), static_cast<float*>(m),
          static_cast<float*>(v), n, cpu::adamw_constants<float>(lr, b1, b2, eps, wd),
          cpu::adamw_bias_correction<float>(lr, bc1, bc2), stream);
  } else if (dtype == DType::F64) {
    adamw(static_cast<double*>(param), static_cast<const double*>(grad), static_cast<double*>(m),
          static_cast<double*>(v), n, cpu::adamw_constants<double>(lr, b1, b2, eps, wd),
          cpu::adamw_bias_correction<double>(lr, bc1, bc2), stream);
  } else {
    DDP_FAIL("AdamW on CUDA: dtype ", dtype_name(dtype), " not supported (float32 or float64)");
  }
}
}  // namespace ddp::kernels::cuda

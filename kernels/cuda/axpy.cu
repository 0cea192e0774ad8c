// axpy.cu - y = beta*y + alpha*x, grid-stride; beta == 0 never reads y (so y may be uninitialised).
#include <cuda_bf16.h>

#include "kernels/cuda/axpy.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
template <class T, class Acc>
__global__ void axpby_kernel(T* y, const T* x, Acc beta, Acc alpha, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    Acc v = alpha * static_cast<Acc>(x[i]);
    if (beta != Acc(0)) v += beta * static_cast<Acc>(y[i]);
    y[i] = static_cast<T>(v);
  }
}
}  // namespace

void axpby(void* y, const void* x, DType dtype, double beta, double alpha, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  int grid = static_cast<int>(std::min<int64_t>((n + 255) / 256, 65535));
  switch (dtype) {
    case DType::F32:
      axpby_kernel<float, float><<<grid, 256, 0, stream>>>(
          static_cast<float*>(y), static_cast<const float*>(x), float(beta), float(alpha), n);
      break;
    case DType::F64:
      axpby_kernel<double, double>
          <<<grid, 256, 0, stream>>>(static_cast<double*>(y), static_cast<const double*>(x), beta, alpha, n);
      break;
    case DType::BF16:
      axpby_kernel<__nv_bfloat16, float><<<grid, 256, 0, stream>>>(
          static_cast<__nv_bfloat16*>(y), static_cast<const __nv_bfloat16*>(x), float(beta), float(alpha), n);
      break;
    default:
      DDP_FAIL("axpby: dtype ", dtype_name(dtype), " not supported on CUDA");
  }
  DDP_CUDA_CHECK_LAUNCH();
}
}  // namespace ddp::kernels::cuda

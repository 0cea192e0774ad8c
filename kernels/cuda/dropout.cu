// dropout.cu - CUDA dropout: the shared counter-based mask (kernels/cpu/dropout.h) applied grid-stride.
#include "kernels/cpu/dropout.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dropout.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
template <class T>
__global__ void dropout_kernel(const T* x, T* y, int64_t n, uint64_t key, uint64_t offset, uint64_t threshold,
                               T scale) {
  DDP_CUDA_KERNEL_LOOP(i, n) {
    y[i] = cpu::dropout_keep(key, offset + static_cast<uint64_t>(i), threshold) ? x[i] * scale : T(0);
  }
}
}  // namespace

template <class T>
void dropout_apply(const T* x, T* y, int64_t n, uint64_t key, uint64_t offset, uint64_t threshold, T scale,
                   cudaStream_t stream) {
  if (n == 0) return;
  dropout_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(x, y, n, key, offset, threshold, scale);
  DDP_CUDA_CHECK_LAUNCH();
}

template void dropout_apply<float>(const float*, float*, int64_t, uint64_t, uint64_t, uint64_t, float,
                                   cudaStream_t);
template void dropout_apply<double>(const double*, double*, int64_t, uint64_t, uint64_t, uint64_t, double,
                                    cudaStream_t);

}  // namespace ddp::kernels::cuda

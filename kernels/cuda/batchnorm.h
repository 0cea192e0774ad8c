// batchnorm.h - 2-D batch normalization on the GPU (float32, float64), same contract and names as
// kernels/cpu/batchnorm.h. Per-channel reductions run one block per channel (deterministic order).
#pragma once
#include <cuda_runtime.h>

#include "kernels/cpu/batchnorm.h"

namespace ddp::kernels::cuda {
using cpu::BatchNormGeometry;

template <class T>
void batch_norm_stats(const T* x, const BatchNormGeometry& g, double eps, double momentum, T* mean, T* invstd,
                      T* running_mean, T* running_var, cudaStream_t stream);
template <class T>
void batch_norm_running_invstd(const T* running_var, int64_t channels, double eps, T* invstd,
                               cudaStream_t stream);
template <class T>
void batch_norm_apply(const T* x, const T* mean, const T* invstd, const T* weight, const T* bias, T* y,
                      const BatchNormGeometry& g, cudaStream_t stream);
template <class T>
void batch_norm_backward(const T* dy, const T* x, const T* mean, const T* invstd, const T* weight, T* dx,
                         T* dweight, T* dbias, const BatchNormGeometry& g, bool training,
                         cudaStream_t stream);

}  // namespace ddp::kernels::cuda

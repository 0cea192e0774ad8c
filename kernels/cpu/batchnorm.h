// batchnorm.h - 2-D batch normalization on the CPU over raw NCHW pointers, per channel c:
//   y = (x - mean[c]) * invstd[c] * weight[c] + bias[c],  invstd = 1 / sqrt(var + eps).
// Training takes mean and the biased variance of the batch (count = N*H*W values per channel) and moves the
// running stats toward them: running = (1 - momentum) * running + momentum * batch, with the unbiased
// variance (PyTorch's convention). Evaluation uses the running stats. Weight and bias may be null (1 and 0).
// BatchNormGeometry is shared with kernels/cuda/batchnorm.h.
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {

struct BatchNormGeometry {
  int64_t batch = 0, channels = 0, spatial = 0;                // N, C, H*W
  constexpr int64_t count() const { return batch * spatial; }  // values per channel (usable on the GPU)
};

// mean (C), invstd (C) of x (N, C, H*W) from the batch; when running_mean/running_var are not null they are
// updated in place with `momentum` (needs count() > 1 for the unbiased variance).
template <class T>
void batch_norm_stats(const T* x, const BatchNormGeometry& g, double eps, double momentum, T* mean, T* invstd,
                      T* running_mean, T* running_var);
// invstd (C) = 1 / sqrt(running_var + eps): the evaluation-mode normalizer.
template <class T>
void batch_norm_running_invstd(const T* running_var, int64_t channels, double eps, T* invstd);
// y (N, C, H*W) = (x - mean) * invstd * weight + bias.
template <class T>
void batch_norm_apply(const T* x, const T* mean, const T* invstd, const T* weight, const T* bias, T* y,
                      const BatchNormGeometry& g);
// Gradients given dy (N, C, H*W); outputs may be null (not needed) and are overwritten. training=true
// differentiates through the batch mean and variance; false treats mean/invstd as constants (an affine map).
template <class T>
void batch_norm_backward(const T* dy, const T* x, const T* mean, const T* invstd, const T* weight, T* dx,
                         T* dweight, T* dbias, const BatchNormGeometry& g, bool training);

}  // namespace ddp::kernels::cpu

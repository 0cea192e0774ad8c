// batchnorm.h - differentiable 2-D batch normalization over (N, H, W) per channel, like
// torch.nn.functional.batch_norm on NCHW input.
#pragma once
#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// x: (N, C, H, W); weight, bias: (C) or undefined (scale 1, shift 0); running_mean, running_var: (C) buffers.
// training=true normalizes with the batch mean and biased variance and, when the running buffers are defined,
// updates them in place (never recorded by autograd): running = (1 - momentum) * running + momentum * batch,
// the variance term unbiased (N*H*W / (N*H*W - 1)); it needs more than one value per channel.
// training=false normalizes with the running buffers (which must be defined); backward is then an affine map.
// Gradients flow to x, weight and bias.
Tensor batch_norm2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                    const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);

}  // namespace ddp::ops

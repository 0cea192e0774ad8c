// conv.h - differentiable 2-D convolution (cross-correlation, like torch.nn.functional.conv2d), NCHW layout.
// CPU: im2col + OpenBLAS GEMM (float32, float64); CUDA: cuDNN (float32, float64).
#pragma once
#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// x: (N, Cin, H, W), weight: (Cout, Cin, kH, kW), bias: (Cout) or undefined
// -> (N, Cout, Ho, Wo) with Ho = (H + 2*padding - kH) / stride + 1 (and Wo alike).
// N = 0 (an empty batch) gives an empty output and zero weight and bias gradients.
// The same stride and zero padding apply to both spatial dimensions.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              int64_t padding = 0);

}  // namespace ddp::ops

// layernorm.h - differentiable layer normalization over the last dimension (GPT-2's ln_1, ln_2, ln_f).
#pragma once
#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// x: (..., C), weight: (C), bias: (C) -> (..., C):
//   y = (x - mean) / sqrt(var + eps) * weight + bias, mean and (biased) var over the last dimension.
// Forward saves mean and 1/sqrt(var + eps) per row; backward gives dx, dweight and dbias.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// layer_norm whose output, under bf16 compute (runtime/ops/mixed_precision.h) on a float32 x, is a bfloat16
// tensor: y rounded once - for a layer norm whose only consumers are bf16 GEMMs, which round their input
// anyway (the GPT's ln_1, ln_2, ln_f: the same values reach the GEMMs, without a float32 y written and then
// converted). Its gradient may come back bf16 (such a GEMM's dx) or float32; dx, dweight, dbias are float32,
// bitwise those of layer_norm given the same gradient values. Otherwise it is layer_norm.
Tensor layer_norm_bf16_output(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

}  // namespace ddp::ops

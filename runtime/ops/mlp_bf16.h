// mlp_bf16.h - the GPT's MLP, proj(gelu(fc(x))), as one bf16 op (models/gpt.cpp MLPBlock uses it while bf16
// compute is on: runtime/ops/mixed_precision.h lists its rounding points). Forward: xb = bf16(x);
// pre = xb fc_W^T + bf16(fc_b) in float32, hidden = bf16(gelu(pre)) rounded once and pre kept as bf16 (on
// the GPU one cuBLASLt GEMM with the GELU_AUX_BIAS epilogue, whose bias has D's type: bf16);
// y = bf16(hidden proj_W^T + proj_b) (float32 bias, as ops::linear) returned as float32. Backward:
// g = bf16(dy); dproj_W = bf16(g^T hidden), dproj_b = bf16(column sums of g); d_pre = bf16((g proj_W) *
// gelu'(pre)) and dfc_b = bf16(column sums of d_pre) (GPU: one GEMM with the DGELU_BGRAD epilogue);
// dfc_W = bf16(d_pre^T xb), dx = bf16(d_pre fc_W). GELU is GPT-2's tanh form. The hidden activation exists
// only as bf16 (hidden and pre: 4 bytes an element saved, where the unfused path saves 6 and also writes
// the float32 fc output and GELU output). Everything bf16 lives inside the op's autograd node; output and
// weight gradients are float32; x is float32 or bf16 (a layer norm's bf16 output), and dx has x's dtype.
#pragma once
#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// x (..., in) float32 or bfloat16; fc_weight (hidden, in), fc_bias (hidden) or undefined; proj_weight (out,
// hidden), proj_bias (out) or undefined -> (..., out) float32 holding bf16 values. CPU (exact emulation) and
// CUDA.
Tensor mlp_bf16(const Tensor& x, const Tensor& fc_weight, const Tensor& fc_bias, const Tensor& proj_weight,
                const Tensor& proj_bias);

// Whether mlp_bf16 runs on this device (the CPU; a GPU in a CUDA build).
bool mlp_bf16_supports(const Device& device);

}  // namespace ddp::ops

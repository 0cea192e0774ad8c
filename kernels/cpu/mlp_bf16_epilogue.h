// mlp_bf16_epilogue.h - the per-element math of the fused bf16 MLP (runtime/ops/mlp_bf16.h), written once for
// the CPU emulation (kernels/cpu/mlp_bf16.cpp), the CUDA fallback kernels (kernels/cuda/mlp_bf16.cu) and the
// tests: GPT-2's tanh GELU and its derivative on a float32 value, and float32 -> bfloat16 rounding to nearest
// even (as BFloat16::from_float and the GPU's __float2bfloat16). cuBLASLt's GELU epilogues compute the same
// functions inside the GEMM on the GPU's fast path; tests/gpu/test_gpu_mlp_bf16.cpp holds both to this code.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/host_device.h"

namespace ddp::kernels::cpu {

// float32 -> the bits of the nearest bfloat16 (ties to even); a NaN stays a quiet NaN.
DDP_HOST_DEVICE inline uint16_t bf16_bits_nearest_even(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
DDP_HOST_DEVICE inline float bf16_bits_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
// f rounded to the nearest bfloat16 value, as a float32.
DDP_HOST_DEVICE inline float round_bf16_nearest_even(float f) {
  return bf16_bits_to_float(bf16_bits_nearest_even(f));
}

// GPT-2's tanh GELU, 0.5 z (1 + tanh(u)) with u = sqrt(2/pi) (z + 0.044715 z^3), in its sigmoid form
// z / (1 + exp(-2u)) (as kernels/cpu/activation.cpp: one exp, no cancellation for large negative z, where
// exp overflows to inf and the quotient is -0).
constexpr float kGeluTwoC = 2.0f * 0.7978845608028654f;               // 2 sqrt(2/pi)
constexpr float kGeluTwoC3 = 2.0f * 0.7978845608028654f * 0.044715f;  // 2 sqrt(2/pi) 0.044715
DDP_HOST_DEVICE inline float gelu_tanh_minus_two_u(float z) { return -z * (kGeluTwoC + kGeluTwoC3 * z * z); }
DDP_HOST_DEVICE inline float gelu_tanh(float z) { return z / (1.0f + expf(gelu_tanh_minus_two_u(z))); }
// d/dz [z s] with s = sigmoid(2u): s (1 + z (2u)' e s), e = exp(-2u), (2u)' = 2c + 6 c3 z^2 (1 - s = e s).
// exp's argument is capped at 88 so that e stays finite (e s is then never inf * 0), and e s (<= 1) is
// formed first (z (2u)' e alone overflows for z below about -9).
DDP_HOST_DEVICE inline float gelu_tanh_grad(float z) {
  const float m = gelu_tanh_minus_two_u(z);
  const float e = expf(m < 88.0f ? m : 88.0f), s = 1.0f / (1.0f + e);
  const float du = kGeluTwoC + 3.0f * kGeluTwoC3 * z * z;
  return s * (1.0f + z * du * (e * s));
}

// The fc GEMM's epilogue (cuBLASLt CUBLASLT_EPILOGUE_GELU_AUX_BIAS): the float32 accumulator plus the bias
// (a bf16 value, in float32) is the pre-activation z; the hidden activation is gelu(z) rounded once to bf16,
// and z is kept rounded to bf16 (the aux matrix) for the backward.
struct GeluBiasBf16 {
  uint16_t hidden, pre;  // bf16 bits
};
DDP_HOST_DEVICE inline GeluBiasBf16 gelu_bias_epilogue(float acc, float bias) {
  const float z = acc + bias;
  return {bf16_bits_nearest_even(gelu_tanh(z)), bf16_bits_nearest_even(z)};
}
// The backward GEMM's epilogue (CUBLASLT_EPILOGUE_DGELU): the float32 accumulator of dL/dhidden times
// gelu'(pre) at the saved bf16 pre-activation, rounded once to bf16.
DDP_HOST_DEVICE inline uint16_t dgelu_epilogue(float acc, uint16_t pre_bits) {
  return bf16_bits_nearest_even(acc * gelu_tanh_grad(bf16_bits_to_float(pre_bits)));
}

}  // namespace ddp::kernels::cpu

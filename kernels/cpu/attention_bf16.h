// attention_bf16.h - causal self-attention with bf16 compute (mixed precision,
// runtime/ops/mixed_precision.h), CPU emulation; kernels/cuda/attention_bf16.h has the same names on bf16
// tensor cores. Same layout and contracts as kernels/cpu/attention.h, float32 only. Every GEMM takes bf16
// operands with float32 accumulation and output: the caller passes a bf16-rounded qkv (and dy), the kernels
// round the softmax probabilities before att v and att^T dy, and the softmax gradient before the dq / dk
// GEMMs. The scores, the softmax, its backward and the saved att stay float32.
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {

void attention_forward_bf16(const float* qkv, float* y, float* att, int64_t B, int64_t T, int64_t C,
                            int64_t n_head);
void attention_backward_bf16(const float* dy, const float* qkv, const float* att, float* dqkv, int64_t B,
                             int64_t T, int64_t C, int64_t n_head);

}  // namespace ddp::kernels::cpu

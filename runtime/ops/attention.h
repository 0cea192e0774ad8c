// attention.h - differentiable GPT-2 causal multi-head self-attention on a fused qkv projection.
#pragma once
#include <cstdint>

#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// qkv: (B, T, 3C) = [q | k | v] along the last dimension (the output of the c_attn linear layer) -> (B, T,
// C). Heads of size hs = C / n_head: att = softmax(q k^T / sqrt(hs)) with a causal mask (token t sees tokens
// <= t), y = att v, heads merged back to (B, T, C) (before the c_proj linear layer). One graph node: forward
// saves qkv and the probabilities (B, n_head, T, T); backward gives dqkv. A bfloat16 qkv (the GPT's qkv GEMM
// under bf16 compute, ops::linear_bf16_output) runs the bf16 path (runtime/ops/mixed_precision.h) and gives
// a bfloat16 y and dqkv.
Tensor causal_self_attention(const Tensor& qkv, int64_t n_head);

}  // namespace ddp::ops

// attention.h - CPU kernels for GPT-2 causal self-attention on a fused qkv projection.
//
// Layout: qkv (B, T, 3C) holds q | k | v along the last dimension; head h of q for token t is
// qkv[b, t, h*hs : (h+1)*hs] with hs = C / n_head (k and v at +C and +2C). The kernels read q, k, v
// in place through gemm leading dimensions (3C), so no permuted copies are made on the CPU.
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {

// att[b, h] = causal_softmax(q k^T / sqrt(hs)) (zeros above the diagonal); y[b, :, head h] = att[b, h] v.
// qkv: (B, T, 3C), y: (B, T, C), att: (B, n_head, T, T) saved for backward.
template <class S>
void attention_forward(const S* qkv, S* y, S* att, int64_t B, int64_t T, int64_t C, int64_t n_head);
// dqkv (B, T, 3C) from dy (B, T, C), the saved qkv and att. Every element of dqkv is written.
template <class S>
void attention_backward(const S* dy, const S* qkv, const S* att, S* dqkv, int64_t B, int64_t T, int64_t C,
                        int64_t n_head);

}  // namespace ddp::kernels::cpu

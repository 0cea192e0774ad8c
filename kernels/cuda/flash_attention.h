// flash_attention.h - CUDA causal self-attention without a (T, T) buffer (float32, float64; head size <=
// 128): tiled over query and key blocks with an online softmax. The forward writes y and the per-row
// log-sum-exp of the scaled scores; the backward recomputes the probabilities tile by tile from it. Same
// layout as kernels/cpu/attention.h: qkv (B, T, 3C) with q | k | v along the last dimension, head h at h *
// hs. The per-tile arithmetic is kernels/cuda/flash_attention_tile.h (shared with a CPU test).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace ddp::kernels::cuda {

// True for the head sizes these kernels take (1..128); runtime/ops/attention.cpp falls back to the
// materialising kernels (kernels/cuda/attention.h) for larger heads.
bool flash_attention_supports(int64_t head_size);

// Elements of scratch the backward needs: D = rowsum(dy * y), (B, n_head, T).
inline int64_t flash_attention_backward_scratch_elems(int64_t B, int64_t T, int64_t n_head) {
  return B * n_head * T;
}

// y (B, T, C) and lse (B, n_head, T): lse[b, h, i] = log sum_{j <= i} exp(q_i . k_j / sqrt(hs)).
template <class S>
void flash_attention_forward(const S* qkv, S* y, S* lse, int64_t B, int64_t T, int64_t C, int64_t n_head,
                             cudaStream_t stream);
// dqkv (B, T, 3C), every element written, from dy (B, T, C), the forward's qkv, y and lse. Deterministic: dK
// and dV come from one pass over key tiles, dQ from a second pass over query tiles (no atomics).
template <class S>
void flash_attention_backward(const S* dy, const S* qkv, const S* y, const S* lse, S* dqkv, S* scratch,
                              int64_t B, int64_t T, int64_t C, int64_t n_head, cudaStream_t stream);

}  // namespace ddp::kernels::cuda

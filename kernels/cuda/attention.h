// attention.h - CUDA causal self-attention on a fused qkv (float32, float64): head permutes, cuBLAS
// strided-batched gemms over the (B * n_head) heads and a causal softmax kernel. Same contracts as
// kernels/cpu/attention.h plus a caller-provided scratch buffer (from the tensor pool). They materialise the
// (B, n_head, T, T) probabilities: runtime/ops/attention.cpp runs them only for heads larger than 128; the rest
// take kernels/cuda/flash_attention.h (no (T, T) buffer). attention.cu also holds the bf16 variants.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace ddp::kernels::cuda {

// Elements of scratch the forward / backward need.
inline int64_t attention_forward_scratch_elems(int64_t B, int64_t T, int64_t C) { return 4 * B * T * C; }
inline int64_t attention_backward_scratch_elems(int64_t B, int64_t T, int64_t C, int64_t n_head) {
  return 7 * B * T * C + B * n_head * T * T;
}

// qkv: (B, T, 3C) -> y: (B, T, C); att: (B, n_head, T, T) probabilities saved for backward.
template <class S>
void attention_forward(const S* qkv, S* y, S* att, S* scratch, int64_t B, int64_t T, int64_t C,
                       int64_t n_head, cudaStream_t stream);
// dqkv: (B, T, 3C) from dy: (B, T, C), qkv and att.
template <class S>
void attention_backward(const S* dy, const S* qkv, const S* att, S* dqkv, S* scratch, int64_t B, int64_t T,
                        int64_t C, int64_t n_head, cudaStream_t stream);

}  // namespace ddp::kernels::cuda

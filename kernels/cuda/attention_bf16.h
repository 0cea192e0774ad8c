// attention_bf16.h - causal self-attention with bf16 compute on the GPU (mixed precision): the same names and
// rounding points as kernels/cpu/attention_bf16.h, with every GEMM a cuBLAS bf16 tensor-core GEMM with
// float32 accumulation and output (cublasGemmStridedBatchedEx). Implemented in attention.cu beside the
// float32 kernels, whose head permutes and softmax kernels it shares. `scratch` as attention.h's float32
// kernels; the bf16 copies of the GEMM operands come from the stream-ordered pool.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace ddp::kernels::cuda {

void attention_forward_bf16(const float* qkv, float* y, float* att, float* scratch, int64_t B, int64_t T,
                            int64_t C, int64_t n_head, cudaStream_t stream);
void attention_backward_bf16(const float* dy, const float* qkv, const float* att, float* dqkv, float* scratch,
                             int64_t B, int64_t T, int64_t C, int64_t n_head, cudaStream_t stream);

}  // namespace ddp::kernels::cuda

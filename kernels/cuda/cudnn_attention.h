// cudnn_attention.h - causal self-attention in bf16 through cuDNN's fused attention (the cuDNN frontend's SDPA
// graph: flash-style tiles on tensor cores, no (T, T) buffer, the masked half skipped), forward and backward.
// q, k, v are read in place from the bf16 (B, T, 3C) qkv and the output written to a bf16 (B, T, C)
// (sdpa_layout.h); the forward also writes cuDNN's float32 softmax statistics (B, n_head, T), which the
// backward reads instead of the probabilities. Graphs are built once per shape and cuDNN handle and cached.
// Built only where the frontend's headers were found at configure time (tools/fetch_cudnn_frontend.py);
// elsewhere cudnn_attention_compiled() is false and the callers keep the materialising bf16 kernels.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/cuda/workspace.h"
#include "runtime/core/dtype.h"

namespace ddp::kernels::cuda {

// True when this build has the cuDNN frontend (the calls below work); false: they raise.
bool cudnn_attention_compiled();

// Why cuDNN's fused attention cannot run this shape on the current device: the layout's reason
// (sdpa_layout.h), a build without the frontend, or cuDNN's own message when its forward or backward graph does
// not build (tried once per device and shape; the graphs stay cached). "" when it can.
std::string cudnn_attention_refusal(int64_t B, int64_t T, int64_t C, int64_t n_head);

// y (B, T, C) = causal softmax(q k^T / sqrt(hs)) v per head, bf16 in and out, float32 inside; stats
// (B, n_head, T) float32 for the backward. The shape must pass sdpa_unsupported_reason.
void cudnn_attention_forward(const BFloat16* qkv, BFloat16* y, float* stats, int64_t B, int64_t T, int64_t C,
                             int64_t n_head, const WorkspaceFn& workspace);
// dqkv (B, T, 3C) from dy (B, T, C), with the forward's qkv, y and stats.
void cudnn_attention_backward(const BFloat16* qkv, const BFloat16* y, const BFloat16* dy, const float* stats,
                              BFloat16* dqkv, int64_t B, int64_t T, int64_t C, int64_t n_head,
                              const WorkspaceFn& workspace);

// Graphs built so far in this process (a test checks a second call of the same shape builds none).
int64_t cudnn_attention_graphs_built();

}  // namespace ddp::kernels::cuda

// sdpa_layout.h - how cuDNN's fused attention (kernels/cuda/cudnn_attention) sees ddp.cpp's attention tensors,
// without a copy: q, k and v are strided views of the (B, T, 3C) qkv activation, the output and its gradient
// are (B, T, C), and cuDNN's softmax statistics are a packed (B, n_head, T, 1) float32 tensor. Every
// dimension is (batch, head, time, head element), cuDNN's order. Plain C++ (no CUDA headers), so the CPU
// tests check the addressing against the CPU kernels' indexing (tests/ops_nn/test_sdpa_layout.cpp) and the
// reason a shape is refused.
#pragma once
#include <array>
#include <cstdint>

namespace ddp::kernels::cuda {

using SdpaDims = std::array<int64_t, 4>;

struct SdpaLayout {
  SdpaDims dims{};          // (B, n_head, T, head size) of q, k, v, o
  SdpaDims qkv_stride{};    // strides of q, k, v inside qkv (elements)
  int64_t q_offset = 0, k_offset = 0, v_offset = 0;  // where q, k, v start inside qkv (elements)
  SdpaDims out_stride{};    // strides of o and dO inside (B, T, C)
  SdpaDims stats_dims{};    // (B, n_head, T, 1)
  SdpaDims stats_stride{};  // packed
};

inline SdpaLayout sdpa_layout(int64_t B, int64_t T, int64_t C, int64_t n_head) {
  const int64_t hs = C / n_head;
  SdpaLayout l;
  l.dims = {B, n_head, T, hs};
  // qkv[b, t, part * C + h * hs + d]: part 0 = q, 1 = k, 2 = v (kernels/cpu/attention's layout).
  l.qkv_stride = {T * 3 * C, hs, 3 * C, 1};
  l.q_offset = 0;
  l.k_offset = C;
  l.v_offset = 2 * C;
  // y[b, t, h * hs + d]
  l.out_stride = {T * C, hs, C, 1};
  l.stats_dims = {B, n_head, T, 1};
  l.stats_stride = {n_head * T, T, 1, 1};
  return l;
}

// Offset of element (b, h, t, d) of a tensor with these strides.
inline int64_t sdpa_offset(const SdpaDims& stride, int64_t b, int64_t h, int64_t t, int64_t d) {
  return b * stride[0] + h * stride[1] + t * stride[2] + d * stride[3];
}

// Why cuDNN's fused bf16 attention does not take this shape (nullptr when it does). cuDNN needs 16-byte
// aligned rows of bf16 (head size a multiple of 8, so every q/k/v row and head starts on 16 bytes given an
// aligned qkv) and, for its backward on sm_80/sm_90, a head size of at most 128.
inline const char* sdpa_unsupported_reason(int64_t B, int64_t T, int64_t C, int64_t n_head) {
  if (B <= 0 || T <= 0 || C <= 0 || n_head <= 0 || C % n_head != 0) return "an empty or ill-formed shape";
  const int64_t hs = C / n_head;
  if (hs % 8 != 0) return "the head size is not a multiple of 8 (cuDNN reads 16-byte rows of bf16)";
  if (hs > 128) return "the head size is above 128 (cuDNN's fused backward takes at most 128)";
  return nullptr;
}

}  // namespace ddp::kernels::cuda

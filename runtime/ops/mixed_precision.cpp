// mixed_precision.cpp - the per-thread bf16 compute mode, conversions to and from bfloat16 on either device,
// the differentiable rounding op, and the bf16 attention op: on CUDA cuDNN's fused attention where the build
// and the shape allow (kernels/cuda/cudnn_attention; bf16 in and out, no (T, T) buffer), else the
// materialising kernels (kernels/{cpu,cuda}/attention_bf16) between two roundings (qkv in, y out).
#include "runtime/ops/mixed_precision.h"

#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/bf16.h"
#include "runtime/autograd/node.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_bf16.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/sdpa_layout.h"
#include "runtime/core/cuda/stream.h"
#include "runtime/ops/cuda_workspace.h"
#endif
#include <cstdlib>
#include <cstring>

namespace ddp::ops {
namespace {
thread_local bool t_bf16 = false;

void check_f32(const Tensor& x, const char* what) {
  DDP_CHECK(x.defined(), what, ": the tensor is undefined");
  DDP_CHECK(x.dtype() == DType::F32, what, ": expected a float32 tensor, got ", dtype_name(x.dtype()),
            " (bf16 mixed precision keeps float32 tensors and rounds them; convert with .to(DType::F32))");
}

struct Bf16RoundBackward final : autograd::Node {
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    return {round_to_bf16(grads[0])};
  }
  const char* name() const override { return "bf16_round"; }
};

struct WidenBf16Backward final : autograd::Node {
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    return {to_bf16(grads[0])};
  }
  const char* name() const override { return "widen_bf16"; }
};

struct NarrowBf16Backward final : autograd::Node {
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    return {grads[0].to(DType::F32)};
  }
  const char* name() const override { return "narrow_bf16"; }
};
}  // namespace

bool bf16_compute_enabled() { return t_bf16; }
Bf16Compute::Bf16Compute(bool on) : prev_(t_bf16) { t_bf16 = on; }
Bf16Compute::~Bf16Compute() { t_bf16 = prev_; }

Tensor to_bf16(const Tensor& x) {
  if (x.defined() && x.dtype() == DType::BF16) return x;
  check_f32(x, "to_bf16");
  Tensor y = Tensor::empty(x.shape(), DType::BF16, x.device());
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) {
    kernels::cuda::to_bf16(x.data<float>(), y.data<BFloat16>(), x.numel());
    return y;
  }
#endif
  kernels::cpu::to_bf16(x.data<float>(), y.data<BFloat16>(), x.numel());
  return y;
}

Tensor round_to_bf16(const Tensor& x) {
  check_f32(x, "round_to_bf16");
  Tensor y = x.clone();
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) {
    kernels::cuda::round_to_bf16(y.data<float>(), y.numel());
    return y;
  }
#endif
  kernels::cpu::round_to_bf16(y.data<float>(), y.numel());
  return y;
}

Tensor widen_bf16(const Tensor& x) {
  DDP_CHECK(x.defined() && x.dtype() == DType::BF16, "widen_bf16: expected a bfloat16 tensor, got ",
            x.defined() ? dtype_name(x.dtype()) : std::string_view("an undefined one"));
  Tensor y = x.to(DType::F32);
  if (autograd::needs_grad({&x})) autograd::record(std::make_shared<WidenBf16Backward>(), {&x}, {&y});
  return y;
}

Tensor narrow_bf16(const Tensor& x) {
  Tensor y = to_bf16(x);
  if (autograd::needs_grad({&x})) autograd::record(std::make_shared<NarrowBf16Backward>(), {&x}, {&y});
  return y;
}

Tensor bf16_round(const Tensor& x) {
  Tensor y;
  {
    autograd::NoGradGuard ng;
    y = round_to_bf16(x);
  }
  if (autograd::needs_grad({&x})) autograd::record(std::make_shared<Bf16RoundBackward>(), {&x}, {&y});
  return y;
}

namespace {
// Forward and backward of the bf16 attention on a rounded qkv (the float32 op's node, with the bf16 kernels).
struct AttentionBf16Backward final : autograd::Node {
  Tensor qkv, att;  // qkv: bf16-rounded float32; att: float32 probabilities
  int64_t n_head = 1;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    const Tensor dy = grads[0];  // rounded by the bf16_round after the op
    const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
    Tensor dqkv = Tensor::empty_like(qkv);
    if (dqkv.numel() == 0) return {dqkv};
#ifdef DDP_WITH_CUDA
    if (qkv.device().is_cuda()) {
      Tensor scratch = Tensor::empty({kernels::cuda::attention_backward_scratch_elems(B, T, C, n_head)},
                                     DType::F32, qkv.device());
      kernels::cuda::attention_backward_bf16(dy.data<float>(), qkv.data<float>(), att.data<float>(),
                                             dqkv.data<float>(), scratch.data<float>(), B, T, C, n_head,
                                             cuda::current_stream());
      return {dqkv};
    }
#endif
    kernels::cpu::attention_backward_bf16(dy.data<float>(), qkv.data<float>(), att.data<float>(),
                                          dqkv.data<float>(), B, T, C, n_head);
    return {dqkv};
  }
  const char* name() const override { return "causal_self_attention_bf16"; }
  void release_saved() override { qkv = att = Tensor(); }
};

Tensor attention_bf16_core(const Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  Tensor y = Tensor::empty({B, T, C}, DType::F32, qkv.device());
  Tensor att = Tensor::empty({B, n_head, T, T}, DType::F32, qkv.device());
  if (y.numel() > 0) {
#ifdef DDP_WITH_CUDA
    if (qkv.device().is_cuda()) {
      Tensor scratch =
          Tensor::empty({kernels::cuda::attention_forward_scratch_elems(B, T, C)}, DType::F32, qkv.device());
      kernels::cuda::attention_forward_bf16(qkv.data<float>(), y.data<float>(), att.data<float>(),
                                            scratch.data<float>(), B, T, C, n_head, cuda::current_stream());
    } else
#endif
    {
      kernels::cpu::attention_forward_bf16(qkv.data<float>(), y.data<float>(), att.data<float>(), B, T, C,
                                           n_head);
    }
  }
  if (autograd::needs_grad({&qkv})) {
    auto node = std::make_shared<AttentionBf16Backward>();
    node->qkv = qkv;
    node->att = att;
    node->n_head = n_head;
    autograd::record(node, {&qkv}, {&y});
  }
  return y;
}

#ifdef DDP_WITH_CUDA
// cuDNN's fused attention on bf16 tensors: qkv rounded once into a bf16 copy (kept for the backward with the
// bf16 output and cuDNN's float32 softmax statistics), y exact bf16 values in float32. The backward rounds dy
// (as the materialising path's outer rounding does) and returns dqkv's bf16 values in float32.
struct AttentionCudnnBackward final : autograd::Node {
  Tensor qkv, y, stats;  // bf16, bf16, float32 (B, n_head, T)
  int64_t n_head = 1;
  bool qkv_bf16 = false;  // the op's qkv was a bf16 tensor: dqkv is returned as one
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
    const Tensor dy = to_bf16(grads[0]);
    Tensor dqkv = Tensor::empty(qkv.shape(), DType::BF16, qkv.device());
    CudaWorkspace ws{qkv.device(), {}};
    kernels::cuda::cudnn_attention_backward(qkv.data<BFloat16>(), y.data<BFloat16>(), dy.data<BFloat16>(),
                                            stats.data<float>(), dqkv.data<BFloat16>(), B, T, C, n_head,
                                            ws.fn());
    return {qkv_bf16 ? dqkv : dqkv.to(DType::F32)};
  }
  const char* name() const override { return "causal_self_attention_cudnn"; }
  void release_saved() override { qkv = y = stats = Tensor(); }
};

Tensor attention_cudnn(const Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  Tensor qb = to_bf16(qkv);
  Tensor yb = Tensor::empty({B, T, C}, DType::BF16, qkv.device());
  Tensor stats = Tensor::empty({B, n_head, T}, DType::F32, qkv.device());
  CudaWorkspace ws{qkv.device(), {}};
  kernels::cuda::cudnn_attention_forward(qb.data<BFloat16>(), yb.data<BFloat16>(), stats.data<float>(), B, T, C,
                                         n_head, ws.fn());
  const bool qkv_bf16 = qkv.dtype() == DType::BF16;
  Tensor y = qkv_bf16 ? yb : yb.to(DType::F32);
  if (autograd::needs_grad({&qkv})) {
    auto node = std::make_shared<AttentionCudnnBackward>();
    node->qkv_bf16 = qkv_bf16;
    node->qkv = qb;
    node->y = yb;
    node->stats = stats;
    node->n_head = n_head;
    autograd::record(node, {&qkv}, {&y});
  }
  return y;
}
#endif

// DDP_CUDNN_ATTENTION=0 turns cuDNN's fused attention off (the materialising kernels instead).
bool cudnn_attention_wanted() {
  const char* v = std::getenv("DDP_CUDNN_ATTENTION");
  return v == nullptr || std::strcmp(v, "0") != 0;
}
}  // namespace

const char* bf16_attention_kernel(Device device, int64_t B, int64_t T, int64_t C, int64_t n_head) {
  return bf16_attention_not_cudnn(device, B, T, C, n_head).empty()
             ? "cudnn"
             : (device.is_cuda() ? "materialising (cuBLAS)" : "materialising (CPU emulation)");
}

std::string bf16_attention_not_cudnn(Device device, int64_t B, int64_t T, int64_t C, int64_t n_head) {
  if (!device.is_cuda()) return "not a CUDA tensor";
  if (!cudnn_attention_wanted()) return "DDP_CUDNN_ATTENTION=0";
#ifdef DDP_WITH_CUDA
  return kernels::cuda::cudnn_attention_refusal(B, T, C, n_head);
#else
  (void)B, (void)T, (void)C, (void)n_head;
  return "a build without CUDA";
#endif
}

const char* bf16_attention_kernel(const Tensor& qkv, int64_t n_head) {
  return bf16_attention_kernel(qkv.device(), qkv.size(0), qkv.size(1), qkv.size(2) / 3, n_head);
}

// Called by ops::causal_self_attention after its checks.
Tensor detail::attention_bf16(const Tensor& qkv, int64_t n_head) {
#ifdef DDP_WITH_CUDA
  if (bf16_attention_not_cudnn(qkv.device(), qkv.size(0), qkv.size(1), qkv.size(2) / 3, n_head).empty())
    return attention_cudnn(qkv, n_head);
#endif
  if (qkv.dtype() == DType::BF16)  // exact both ways: y is rounded before it is narrowed
    return narrow_bf16(bf16_round(attention_bf16_core(widen_bf16(qkv), n_head)));
  return bf16_round(attention_bf16_core(bf16_round(qkv), n_head));
}

}  // namespace ddp::ops

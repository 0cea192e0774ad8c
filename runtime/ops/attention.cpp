// attention.cpp - forward and backward of causal_self_attention as one fused node, dispatching to
// kernels/cpu/attention (strided gemms per (batch, head); saves the (B, n_head, T, T) probabilities) or, on
// CUDA, kernels/cuda/flash_attention (tiled, online softmax; saves y and the (B, n_head, T) log-sum-exp, no
// (T, T) buffer). CUDA heads larger than the flash kernels take (> 128) use the materialising
// kernels/cuda/attention.
#include "runtime/ops/attention.h"

#include "kernels/cpu/attention.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/mixed_precision.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cuda/attention.h"
#include "kernels/cuda/flash_attention.h"
#include "runtime/core/cuda/stream.h"
#endif

namespace ddp::ops {
namespace {
// True when the op runs the flash kernels: CUDA and a head size they take.
bool uses_flash(const Tensor& qkv, int64_t n_head) {
#ifdef DDP_WITH_CUDA
  return qkv.device().is_cuda() && kernels::cuda::flash_attention_supports(qkv.size(2) / 3 / n_head);
#else
  (void)qkv;
  (void)n_head;
  return false;
#endif
}

struct AttentionBackward final : autograd::Node {
  Tensor qkv;
  Tensor att;  // (B, n_head, T, T) probabilities; the materialising kernels only
  Tensor y,
      lse;  // y (detached: saving y itself would make y -> node -> y a cycle) and (B, n_head, T); flash only
  int64_t n_head = 1;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    const Tensor& dy = grads[0];
    const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
    Tensor dqkv = Tensor::empty_like(qkv);
    if (dqkv.numel() == 0) return {dqkv};
    DDP_DISPATCH_FLOATING(qkv.dtype(), "causal_self_attention backward", [&] {
#ifdef DDP_WITH_CUDA
      if (lse.defined()) {
        Tensor scratch = Tensor::empty({kernels::cuda::flash_attention_backward_scratch_elems(B, T, n_head)},
                                       qkv.dtype(), qkv.device());
        kernels::cuda::flash_attention_backward(
            dy.data<scalar_t>(), qkv.data<scalar_t>(), y.data<scalar_t>(), lse.data<scalar_t>(),
            dqkv.data<scalar_t>(), scratch.data<scalar_t>(), B, T, C, n_head, cuda::current_stream());
        return;
      }
      if (qkv.device().is_cuda()) {
        Tensor scratch = Tensor::empty({kernels::cuda::attention_backward_scratch_elems(B, T, C, n_head)},
                                       qkv.dtype(), qkv.device());
        kernels::cuda::attention_backward(dy.data<scalar_t>(), qkv.data<scalar_t>(), att.data<scalar_t>(),
                                          dqkv.data<scalar_t>(), scratch.data<scalar_t>(), B, T, C, n_head,
                                          cuda::current_stream());
        return;
      }
#endif
      kernels::cpu::attention_backward(dy.data<scalar_t>(), qkv.data<scalar_t>(), att.data<scalar_t>(),
                                       dqkv.data<scalar_t>(), B, T, C, n_head);
    });
    return {dqkv};
  }
  const char* name() const override { return "causal_self_attention"; }
  void release_saved() override { qkv = att = y = lse = Tensor(); }
};
}  // namespace

Tensor causal_self_attention(const Tensor& qkv, int64_t n_head) {
  DDP_CHECK(qkv.defined(), "causal_self_attention: qkv is undefined");
  DDP_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0,
            "causal_self_attention: qkv must be (B, T, 3C); got shape ", shape_str(qkv.shape()));
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  DDP_CHECK(n_head > 0 && C % n_head == 0, "causal_self_attention: n_head = ", n_head,
            " must be positive and divide C = ", C, " (qkv of shape ", shape_str(qkv.shape()), ")");
  if (takes_bf16_path(qkv)) return detail::attention_bf16(qkv, n_head);
  const bool flash = uses_flash(qkv, n_head);
  Tensor y = Tensor::empty({B, T, C}, qkv.dtype(), qkv.device());
  Tensor att, lse;
  if (flash)
    lse = Tensor::empty({B, n_head, T}, qkv.dtype(), qkv.device());
  else
    att = Tensor::empty({B, n_head, T, T}, qkv.dtype(), qkv.device());
  if (y.numel() > 0) {
    DDP_DISPATCH_FLOATING(qkv.dtype(), "causal_self_attention", [&] {
#ifdef DDP_WITH_CUDA
      if (flash) {
        kernels::cuda::flash_attention_forward(qkv.data<scalar_t>(), y.data<scalar_t>(), lse.data<scalar_t>(),
                                               B, T, C, n_head, cuda::current_stream());
        return;
      }
      if (qkv.device().is_cuda()) {
        Tensor scratch = Tensor::empty({kernels::cuda::attention_forward_scratch_elems(B, T, C)}, qkv.dtype(),
                                       qkv.device());
        kernels::cuda::attention_forward(qkv.data<scalar_t>(), y.data<scalar_t>(), att.data<scalar_t>(),
                                         scratch.data<scalar_t>(), B, T, C, n_head, cuda::current_stream());
        return;
      }
#endif
      DDP_CHECK(qkv.device().is_cpu(), "causal_self_attention on ", qkv.device().str(),
                " is not available in this build");
      kernels::cpu::attention_forward(qkv.data<scalar_t>(), y.data<scalar_t>(), att.data<scalar_t>(), B, T, C,
                                      n_head);
    });
  }
  if (autograd::needs_grad({&qkv})) {
    auto node = std::make_shared<AttentionBackward>();
    node->qkv = qkv;
    node->att = att;
    if (flash) node->y = y.detach();
    node->lse = lse;
    node->n_head = n_head;
    autograd::record(node, {&qkv}, {&y});
  }
  return y;
}

}  // namespace ddp::ops

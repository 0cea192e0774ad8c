// mixed_precision.cpp - the per-thread bf16 compute mode, conversions to and from bfloat16 on either device,
// the differentiable rounding op, and the bf16 attention (rounding around the float32 kernel).
#include "runtime/ops/mixed_precision.h"

#include "kernels/cpu/bf16.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/attention.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cuda/bf16.h"
#endif

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
}  // namespace

bool bf16_compute_enabled() { return t_bf16; }
Bf16Compute::Bf16Compute(bool on) : prev_(t_bf16) { t_bf16 = on; }
Bf16Compute::~Bf16Compute() { t_bf16 = prev_; }

Tensor to_bf16(const Tensor& x) {
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

Tensor bf16_round(const Tensor& x) {
  Tensor y;
  {
    autograd::NoGradGuard ng;
    y = round_to_bf16(x);
  }
  if (autograd::needs_grad({&x})) autograd::record(std::make_shared<Bf16RoundBackward>(), {&x}, {&y});
  return y;
}

Tensor detail::attention_bf16(const Tensor& qkv, int64_t n_head) {
  Tensor rounded_in = bf16_round(qkv);
  Tensor y;
  {
    Bf16Compute off(false);  // the float32 kernel inside
    y = causal_self_attention(rounded_in, n_head);
  }
  return bf16_round(y);
}

}  // namespace ddp::ops

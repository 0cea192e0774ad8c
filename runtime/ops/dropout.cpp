// dropout.cpp - forward and backward of dropout: both apply the same counter-based mask (kernels/*/dropout),
// so backward saves only (key, offset, p), never a mask tensor.
#include "runtime/ops/dropout.h"

#include "kernels/cpu/dropout.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/device_kernel.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cuda/dropout.h"
#include "runtime/core/cuda/stream.h"
#endif

namespace ddp::ops {
namespace {
struct MaskParams {
  uint64_t key = 0, offset = 0, threshold = 0;
  double scale = 1.0;
};

// y = mask(x) * scale (x and y of the same shape, dtype and device).
void apply_mask(const Tensor& x, Tensor& y, const MaskParams& m) {
  DDP_DISPATCH_FLOATING(x.dtype(), "dropout", [&] {
    const scalar_t scale = static_cast<scalar_t>(m.scale);
    DDP_KERNEL_ON_STREAM(x.device(), dropout_apply, x.data<scalar_t>(), y.data<scalar_t>(), x.numel(), m.key,
                         m.offset, m.threshold, scale);
  });
}

struct DropoutBackward final : autograd::Node {
  MaskParams mask;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    Tensor dx = Tensor::empty_like(grads[0]);
    apply_mask(grads[0], dx, mask);
    return {dx};
  }
  const char* name() const override { return "dropout"; }
};
}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, uint64_t seed, uint64_t offset) {
  DDP_CHECK(x.defined(), "dropout: x is undefined");
  DDP_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability p = ", p, " is outside [0, 1]");
  if (!training || p == 0.0) return x;
  MaskParams m;
  m.key = kernels::cpu::dropout_key(seed);
  m.offset = offset;
  m.threshold = kernels::cpu::dropout_threshold(p);
  m.scale = p >= 1.0 ? 0.0 : 1.0 / (1.0 - p);
  Tensor y = Tensor::empty_like(x);
  if (x.numel() > 0) apply_mask(x, y, m);
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<DropoutBackward>();
    node->mask = m;
    autograd::record(node, {&x}, {&y});
  }
  return y;
}

Tensor dropout(const Tensor& x, double p, bool training, DropoutGenerator& gen) {
  if (!training || p == 0.0)
    return dropout(x, p, training, gen.seed, gen.offset);  // checks p, uses no counters
  return dropout(x, p, training, gen.seed, gen.take(x.numel()));
}

}  // namespace ddp::ops

// reduce.cpp - forward and backward of the reductions.
#include "runtime/ops/reduce.h"

#include "runtime/autograd/node.h"

namespace ddp::ops {
namespace {
struct SumAllBackward final : autograd::Node {
  Shape in_shape;
  double scale = 1.0;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Tensor g = Tensor::full(in_shape, grads[0].item() * scale, grads[0].dtype(), grads[0].device());
    return {g};
  }
  const char* name() const override { return "sum"; }
};

Tensor sum_all(const Tensor& x, double scale) {
  DDP_CHECK(x.device().is_cpu(), "sum on ", x.device().str(), " is not available in this build");
  Tensor out = Tensor::empty({}, x.dtype(), x.device());
  DDP_DISPATCH_FLOATING(x.dtype(), "sum", [&] {
    const scalar_t* p = x.data<scalar_t>();
    double acc = 0;  // accumulate in double: sums of many float32 values stay accurate
    for (int64_t i = 0, n = x.numel(); i < n; ++i) acc += p[i];
    out.data<scalar_t>()[0] = static_cast<scalar_t>(acc * scale);
  });
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<SumAllBackward>();
    node->in_shape = x.shape();
    node->scale = scale;
    autograd::record(node, {&x}, {&out});
  }
  return out;
}
}  // namespace

Tensor sum(const Tensor& x) { return sum_all(x, 1.0); }
Tensor mean(const Tensor& x) {
  DDP_CHECK(x.numel() > 0, "mean of an empty tensor");
  return sum_all(x, 1.0 / static_cast<double>(x.numel()));
}

}  // namespace ddp::ops

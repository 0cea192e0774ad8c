// layernorm.cpp - forward and backward of layer_norm, dispatching to kernels/{cpu,cuda}/layernorm.
#include "runtime/ops/layernorm.h"

#include "kernels/cpu/layernorm.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/device_kernel.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cuda/layernorm.h"
#include "runtime/core/cuda/stream.h"
#endif

namespace ddp::ops {
namespace {
struct LayerNormBackward final : autograd::Node {
  Tensor x, weight, mean, rstd;  // mean, rstd: (rows)
  int64_t rows = 0, cols = 0;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor(), Tensor(), Tensor()};
    Tensor dx, dweight, dbias;
    if (next_edges[0].valid()) dx = Tensor::empty_like(x);
    // dweight and dbias straight into their DDP bucket slots where the reducer offers them (autograd/node.h);
    // the kernel overwrites them.
    auto parameter_gradient = [&](size_t edge) {
      return autograd::gradient_destination_or_empty(next_edges[edge], weight.shape(), weight.dtype(),
                                                     weight.device());
    };
    if (next_edges[1].valid()) dweight = parameter_gradient(1);
    if (next_edges[2].valid()) dbias = parameter_gradient(2);
    if (rows == 0) {  // an empty batch: dweight and dbias are sums over no rows
      if (dweight.defined()) dweight.zero_();
      if (dbias.defined()) dbias.zero_();
      return {dx, dweight, dbias};
    }
    DDP_DISPATCH_FLOATING(x.dtype(), "layer_norm backward", [&] {
      scalar_t* pdx = dx.defined() ? dx.data<scalar_t>() : nullptr;
      scalar_t* pdw = dweight.defined() ? dweight.data<scalar_t>() : nullptr;
      scalar_t* pdb = dbias.defined() ? dbias.data<scalar_t>() : nullptr;
      DDP_KERNEL_ON_STREAM(x.device(), layernorm_backward, grads[0].data<scalar_t>(), x.data<scalar_t>(),
                           weight.data<scalar_t>(), mean.data<scalar_t>(), rstd.data<scalar_t>(), pdx, pdw,
                           pdb, rows, cols);
    });
    return {dx, dweight, dbias};
  }
  const char* name() const override { return "layer_norm"; }
  void release_saved() override { x = weight = mean = rstd = Tensor(); }
};

void check_param(const char* what, const Tensor& p, const Tensor& x) {
  const int64_t cols = x.size(-1);
  DDP_CHECK(p.defined(), "layer_norm: ", what, " is undefined; pass a (", cols, ") tensor");
  DDP_CHECK(p.shape() == Shape{cols}, "layer_norm: ", what, " has shape ", shape_str(p.shape()),
            " but x of shape ", shape_str(x.shape()), " needs (", cols, ")");
  DDP_CHECK(p.dtype() == x.dtype(), "layer_norm: ", what, " is ", dtype_name(p.dtype()), " but x is ",
            dtype_name(x.dtype()));
  DDP_CHECK(p.device() == x.device(), "layer_norm: ", what, " on ", p.device().str(), " but x on ",
            x.device().str());
}
}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  DDP_CHECK(x.defined(), "layer_norm: x is undefined");
  DDP_CHECK(x.dim() >= 1 && x.size(-1) > 0, "layer_norm: x of shape ", shape_str(x.shape()),
            " needs a non-empty last dimension to normalise over");
  DDP_CHECK(eps >= 0, "layer_norm: eps must be >= 0; got ", eps);
  check_param("weight", weight, x);
  check_param("bias", bias, x);
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  Tensor y = Tensor::empty_like(x);
  Tensor mean = Tensor::empty({rows}, x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, x.dtype(), x.device());
  if (rows > 0) {
    DDP_DISPATCH_FLOATING(x.dtype(), "layer_norm", [&] {
      DDP_KERNEL_ON_STREAM(x.device(), layernorm_forward, x.data<scalar_t>(), weight.data<scalar_t>(),
                           bias.data<scalar_t>(), y.data<scalar_t>(), mean.data<scalar_t>(),
                           rstd.data<scalar_t>(), rows, cols, eps);
    });
  }
  if (autograd::needs_grad({&x, &weight, &bias})) {
    auto node = std::make_shared<LayerNormBackward>();
    node->x = x;
    node->weight = weight;
    node->mean = mean;
    node->rstd = rstd;
    node->rows = rows;
    node->cols = cols;
    autograd::record(node, {&x, &weight, &bias}, {&y});
  }
  return y;
}

}  // namespace ddp::ops

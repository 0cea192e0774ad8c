// layernorm.cpp - forward and backward of layer_norm, dispatching to kernels/{cpu,cuda}/layernorm.
#include "runtime/ops/layernorm.h"

#include "kernels/cpu/layernorm.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/device_kernel.h"
#include "runtime/ops/mixed_precision.h"
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
    if (grads[0].dtype() == DType::BF16) {  // the gradient of a bf16 y (layer_norm_bf16_output)
#ifdef DDP_WITH_CUDA
      if (x.device().is_cuda()) {
        kernels::cuda::layernorm_backward(
            grads[0].data<BFloat16>(), x.data<float>(), weight.data<float>(), mean.data<float>(),
            rstd.data<float>(), dx.defined() ? dx.data<float>() : nullptr,
            dweight.defined() ? dweight.data<float>() : nullptr,
            dbias.defined() ? dbias.data<float>() : nullptr, rows, cols, cuda::current_stream());
        return {dx, dweight, dbias};
      }
#endif
      grads[0] = grads[0].to(DType::F32);  // exact; the CPU's float32 kernel
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

namespace {
Tensor layer_norm_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                       bool bf16_output) {
  DDP_CHECK(x.defined(), "layer_norm: x is undefined");
  DDP_CHECK(x.dim() >= 1 && x.size(-1) > 0, "layer_norm: x of shape ", shape_str(x.shape()),
            " needs a non-empty last dimension to normalise over");
  DDP_CHECK(eps >= 0, "layer_norm: eps must be >= 0; got ", eps);
  check_param("weight", weight, x);
  check_param("bias", bias, x);
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  const bool bf16_y = bf16_output && use_bf16_compute(x);
  Tensor y = bf16_y ? Tensor::empty(x.shape(), DType::BF16, x.device()) : Tensor::empty_like(x);
  Tensor mean = Tensor::empty({rows}, x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, x.dtype(), x.device());
  if (rows > 0 && bf16_y) {
#ifdef DDP_WITH_CUDA
    if (x.device().is_cuda()) {
      kernels::cuda::layernorm_forward(x.data<float>(), weight.data<float>(), bias.data<float>(),
                                       y.data<BFloat16>(), mean.data<float>(), rstd.data<float>(), rows, cols,
                                       eps, cuda::current_stream());
    } else
#endif
    {  // the CPU's float32 kernel, rounded once
      Tensor y32 = Tensor::empty_like(x);
      kernels::cpu::layernorm_forward(x.data<float>(), weight.data<float>(), bias.data<float>(),
                                      y32.data<float>(), mean.data<float>(), rstd.data<float>(), rows, cols,
                                      eps);
      y = to_bf16(y32);
    }
  } else if (rows > 0) {
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
}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return layer_norm_impl(x, weight, bias, eps, false);
}
Tensor layer_norm_bf16_output(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return layer_norm_impl(x, weight, bias, eps, true);
}

}  // namespace ddp::ops

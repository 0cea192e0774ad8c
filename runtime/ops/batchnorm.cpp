// batchnorm.cpp - forward and backward of batch_norm2d side by side: checks, the running-stat update, the
// autograd node (saves x, weight and the per-channel mean and 1/std it normalized with).
#include "runtime/ops/batchnorm.h"

#include "kernels/cpu/batchnorm.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/device_kernel.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cuda/batchnorm.h"
#include "runtime/core/cuda/stream.h"
#endif

namespace ddp::ops {
namespace {
using kernels::cpu::BatchNormGeometry;

// A (C) per-channel tensor argument: undefined is allowed when `optional`.
void check_channel_vector(const char* what, const Tensor& t, const Tensor& x, bool optional) {
  if (!t.defined()) {
    DDP_CHECK(optional, "batch_norm2d: ", what, " must be defined here (a (", x.size(1), ") tensor)");
    return;
  }
  DDP_CHECK(t.dim() == 1 && t.size(0) == x.size(1), "batch_norm2d: ", what, " must be (C) = (", x.size(1),
            ") for x ", shape_str(x.shape()), ", got ", shape_str(t.shape()));
  DDP_CHECK(t.dtype() == x.dtype() && t.device() == x.device(), "batch_norm2d: ", what, " must be ",
            dtype_name(x.dtype()), " on ", x.device().str(), " like x (got ", dtype_name(t.dtype()), " on ",
            t.device().str(), ")");
}

template <class T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

struct BatchNorm2dBackward final : autograd::Node {
  Tensor x, weight, mean, invstd;
  BatchNormGeometry geometry;
  bool training = true;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& dy = grads[0];
    if (!dy.defined()) return {Tensor(), Tensor(), Tensor()};
    DDP_CHECK(dy.shape() == x.shape(), "batch_norm2d backward: gradient has shape ", shape_str(dy.shape()),
              ", expected ", shape_str(x.shape()));
    Tensor dx, dweight, dbias;
    if (next_edges[0].valid()) dx = Tensor::empty_like(x);
    // dweight and dbias straight into their DDP bucket slots where the reducer offers them (autograd/node.h);
    // the kernel overwrites them.
    auto parameter_gradient = [&](size_t edge) {
      return autograd::gradient_destination_or_empty(next_edges[edge], mean.shape(), mean.dtype(), mean.device());
    };
    if (next_edges[1].valid()) dweight = parameter_gradient(1);
    if (next_edges[2].valid()) dbias = parameter_gradient(2);
    DDP_DISPATCH_FLOATING(x.dtype(), "batch_norm2d backward", [&] {
      using T = scalar_t;
      DDP_KERNEL_ON_STREAM(x.device(), batch_norm_backward, dy.data<T>(), x.data<T>(), mean.data<T>(),
                           invstd.data<T>(), ptr_or_null<T>(weight), ptr_or_null<T>(dx),
                           ptr_or_null<T>(dweight), ptr_or_null<T>(dbias), geometry, training);
    });
    return {dx, dweight, dbias};
  }
  const char* name() const override { return "batch_norm2d"; }
  void release_saved() override { x = weight = mean = invstd = Tensor(); }
};

}  // namespace

Tensor batch_norm2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                    const Tensor& running_var, bool training, double momentum, double eps) {
  DDP_CHECK(x.defined() && x.dim() == 4, "batch_norm2d: x must be (N, C, H, W), got ",
            x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  check_channel_vector("weight", weight, x, true);
  check_channel_vector("bias", bias, x, true);
  check_channel_vector("running_mean", running_mean, x, training);
  check_channel_vector("running_var", running_var, x, training);
  DDP_CHECK(running_mean.defined() == running_var.defined(),
            "batch_norm2d: running_mean and running_var must be both defined or both undefined");
  DDP_CHECK(!(running_mean.defined() && running_mean.requires_grad()) &&
                !(running_var.defined() && running_var.requires_grad()),
            "batch_norm2d: running_mean/running_var are buffers and must not require grad");
  DDP_CHECK(eps > 0, "batch_norm2d: eps must be > 0, got ", eps);
  DDP_CHECK(momentum >= 0 && momentum <= 1, "batch_norm2d: momentum must be in [0, 1], got ", momentum);
  BatchNormGeometry g;
  g.batch = x.size(0);
  g.channels = x.size(1);
  g.spatial = x.size(2) * x.size(3);
  if (training)
    DDP_CHECK(g.count() > 1, "batch_norm2d: training needs more than one value per channel, got x ",
              shape_str(x.shape()), "; use a larger batch or evaluation mode");

  Tensor mean = Tensor::empty({g.channels}, x.dtype(), x.device());
  Tensor invstd = Tensor::empty({g.channels}, x.dtype(), x.device());
  Tensor y = Tensor::empty_like(x);
  DDP_DISPATCH_FLOATING(x.dtype(), "batch_norm2d", [&] {
    using T = scalar_t;
    const Device dev = x.device();
    if (training) {
      DDP_KERNEL_ON_STREAM(dev, batch_norm_stats, x.data<T>(), g, eps, momentum, mean.data<T>(),
                           invstd.data<T>(), ptr_or_null<T>(running_mean), ptr_or_null<T>(running_var));
    } else {
      mean.copy_from(running_mean);  // a snapshot: later training steps may move the buffer before backward
      DDP_KERNEL_ON_STREAM(dev, batch_norm_running_invstd, running_var.data<T>(), g.channels, eps,
                           invstd.data<T>());
    }
    DDP_KERNEL_ON_STREAM(dev, batch_norm_apply, x.data<T>(), mean.data<T>(), invstd.data<T>(),
                         ptr_or_null<T>(weight), ptr_or_null<T>(bias), y.data<T>(), g);
  });
  if (autograd::needs_grad({&x, &weight, &bias})) {
    auto node = std::make_shared<BatchNorm2dBackward>();
    node->x = x;
    node->weight = weight;
    node->mean = mean;
    node->invstd = invstd;
    node->geometry = g;
    node->training = training;
    autograd::record(node, {&x, &weight, &bias}, {&y});
  }
  return y;
}

}  // namespace ddp::ops

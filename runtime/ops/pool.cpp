// pool.cpp - forward and backward of max_pool2d (argmax saved as int32 per output) and avg_pool2d.
#include "runtime/ops/pool.h"

#include <climits>

#include "kernels/cpu/pool.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/device_kernel.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cuda/pool.h"
#include "runtime/core/cuda/stream.h"
#endif

namespace ddp::ops {
namespace {
using kernels::cpu::PoolGeometry;

PoolGeometry pool_geometry(const char* op, const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  DDP_CHECK(x.defined() && x.dim() == 4, op, ": x must be (N, C, H, W), got ",
            x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  DDP_CHECK(kernel >= 1, op, ": kernel must be >= 1, got ", kernel);
  if (stride == 0) stride = kernel;
  DDP_CHECK(stride >= 1, op, ": stride must be >= 1 (or 0 for stride = kernel), got ", stride);
  DDP_CHECK(padding >= 0 && padding <= kernel / 2, op, ": padding must be in [0, kernel/2] = [0, ",
            kernel / 2, "], got ", padding);
  DDP_CHECK(x.size(2) * x.size(3) < INT_MAX, op, ": plane ", x.size(2), "x", x.size(3),
            " too large for int32 argmax indices");
  PoolGeometry g;
  g.planes = x.size(0) * x.size(1);
  g.in_h = x.size(2);
  g.in_w = x.size(3);
  g.kernel = kernel;
  g.stride = stride;
  g.padding = padding;
  const int64_t span_h = g.in_h + 2 * padding - kernel, span_w = g.in_w + 2 * padding - kernel;
  DDP_CHECK(span_h >= 0 && span_w >= 0, op, ": kernel ", kernel, " is larger than the padded input ",
            g.in_h + 2 * padding, "x", g.in_w + 2 * padding, " of x ", shape_str(x.shape()));
  g.out_h = span_h / stride + 1;
  g.out_w = span_w / stride + 1;
  return g;
}

Shape out_shape(const Tensor& x, const PoolGeometry& g) { return {x.size(0), x.size(1), g.out_h, g.out_w}; }

struct MaxPool2dBackward final : autograd::Node {
  Tensor argmax;  // int32 (N, C, Ho, Wo)
  Shape in_shape;
  PoolGeometry geometry;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& dy = grads[0];
    if (!dy.defined() || !next_edges[0].valid()) return {Tensor()};
    DDP_CHECK(dy.shape() == argmax.shape(), "max_pool2d backward: gradient has shape ", shape_str(dy.shape()),
              ", expected ", shape_str(argmax.shape()));
    Tensor dx = Tensor::empty(in_shape, dy.dtype(), dy.device());
    const int32_t* idx = static_cast<const int32_t*>(argmax.raw_data());
    DDP_DISPATCH_FLOATING(dy.dtype(), "max_pool2d backward", [&] {
      DDP_KERNEL_ON_STREAM(dy.device(), max_pool2d_backward, dy.data<scalar_t>(), idx, dx.data<scalar_t>(),
                           geometry);
    });
    return {dx};
  }
  const char* name() const override { return "max_pool2d"; }
  void release_saved() override { argmax = Tensor(); }
};

struct AvgPool2dBackward final : autograd::Node {
  Shape in_shape;
  PoolGeometry geometry;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& dy = grads[0];
    if (!dy.defined() || !next_edges[0].valid()) return {Tensor()};
    DDP_CHECK(dy.numel() == geometry.planes * geometry.out_h * geometry.out_w,
              "avg_pool2d backward: gradient has shape ", shape_str(dy.shape()));
    Tensor dx = Tensor::empty(in_shape, dy.dtype(), dy.device());
    DDP_DISPATCH_FLOATING(dy.dtype(), "avg_pool2d backward", [&] {
      DDP_KERNEL_ON_STREAM(dy.device(), avg_pool2d_backward, dy.data<scalar_t>(), dx.data<scalar_t>(),
                           geometry);
    });
    return {dx};
  }
  const char* name() const override { return "avg_pool2d"; }
};

}  // namespace

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  const PoolGeometry g = pool_geometry("max_pool2d", x, kernel, stride, padding);
  Tensor y = Tensor::empty(out_shape(x, g), x.dtype(), x.device());
  Tensor argmax = Tensor::empty(out_shape(x, g), DType::I32, x.device());
  int32_t* idx = static_cast<int32_t*>(argmax.raw_data());
  DDP_DISPATCH_FLOATING(x.dtype(), "max_pool2d", [&] {
    DDP_KERNEL_ON_STREAM(x.device(), max_pool2d_forward, x.data<scalar_t>(), y.data<scalar_t>(), idx, g);
  });
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<MaxPool2dBackward>();
    node->argmax = argmax;
    node->in_shape = x.shape();
    node->geometry = g;
    autograd::record(node, {&x}, {&y});
  }
  return y;
}

Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  const PoolGeometry g = pool_geometry("avg_pool2d", x, kernel, stride, padding);
  Tensor y = Tensor::empty(out_shape(x, g), x.dtype(), x.device());
  DDP_DISPATCH_FLOATING(x.dtype(), "avg_pool2d", [&] {
    DDP_KERNEL_ON_STREAM(x.device(), avg_pool2d_forward, x.data<scalar_t>(), y.data<scalar_t>(), g);
  });
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<AvgPool2dBackward>();
    node->in_shape = x.shape();
    node->geometry = g;
    autograd::record(node, {&x}, {&y});
  }
  return y;
}

}  // namespace ddp::ops

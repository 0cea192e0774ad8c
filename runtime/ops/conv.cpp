// conv.cpp - forward and backward of conv2d side by side: shape checks, the autograd node, device dispatch.
#include "runtime/ops/conv.h"

#include <climits>

#include "kernels/cpu/conv.h"
#include "runtime/autograd/node.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cuda/conv.h"
#include "runtime/ops/cuda_workspace.h"
#endif

namespace ddp::ops {
namespace {
using kernels::cpu::ConvGeometry;

ConvGeometry conv_geometry(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
                           int64_t padding) {
  DDP_CHECK(x.defined() && weight.defined(), "conv2d: x and weight must be defined tensors");
  DDP_CHECK(x.dim() == 4, "conv2d: x must be (N, Cin, H, W), got shape ", shape_str(x.shape()));
  DDP_CHECK(weight.dim() == 4, "conv2d: weight must be (Cout, Cin, kH, kW), got shape ",
            shape_str(weight.shape()));
  DDP_CHECK(weight.size(1) == x.size(1), "conv2d: weight ", shape_str(weight.shape()), " expects ",
            weight.size(1), " input channels but x ", shape_str(x.shape()), " has ", x.size(1));
  DDP_CHECK(stride >= 1, "conv2d: stride must be >= 1, got ", stride);
  DDP_CHECK(padding >= 0, "conv2d: padding must be >= 0, got ", padding);
  DDP_CHECK(x.dtype() == weight.dtype(), "conv2d: x is ", dtype_name(x.dtype()), " but weight is ",
            dtype_name(weight.dtype()), "; convert one with .to(dtype)");
  DDP_CHECK(x.device() == weight.device(), "conv2d: x is on ", x.device().str(), " but weight is on ",
            weight.device().str());
  if (bias.defined()) {
    DDP_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "conv2d: bias must be (Cout) = (",
              weight.size(0), "), got shape ", shape_str(bias.shape()));
    DDP_CHECK(bias.dtype() == x.dtype() && bias.device() == x.device(), "conv2d: bias must be ",
              dtype_name(x.dtype()), " on ", x.device().str(), " like x (got ", dtype_name(bias.dtype()),
              " on ", bias.device().str(), ")");
  }
  ConvGeometry g;
  g.batch = x.size(0);
  g.in_channels = x.size(1);
  g.in_h = x.size(2);
  g.in_w = x.size(3);
  g.out_channels = weight.size(0);
  g.kernel_h = weight.size(2);
  g.kernel_w = weight.size(3);
  g.stride = stride;
  g.padding = padding;
  g.out_h = kernels::cpu::conv_output_size(g.in_h, g.kernel_h, stride, padding);
  g.out_w = kernels::cpu::conv_output_size(g.in_w, g.kernel_w, stride, padding);
  // An empty batch (N = 0) is fine: an empty output, zero weight and bias gradients (as PyTorch).
  DDP_CHECK((g.batch == 0 || x.numel() > 0) && weight.numel() > 0, "conv2d: input ", shape_str(x.shape()),
            " or weight ", shape_str(weight.shape()),
            " has no channels or pixels (only the batch dimension may be 0)");
  DDP_CHECK(g.out_h > 0 && g.out_w > 0, "conv2d: kernel ", g.kernel_h, "x", g.kernel_w,
            " does not fit the padded input ", g.in_h + 2 * padding, "x", g.in_w + 2 * padding,
            "; use a smaller kernel or more padding");
  // OpenBLAS and cuDNN take int sizes
  DDP_CHECK(g.col_rows() * g.out_pixels() < INT_MAX && g.out_channels * g.out_pixels() < INT_MAX,
            "conv2d: image too large for one GEMM (", shape_str(x.shape()), " with kernel ",
            shape_str(weight.shape()), ")");
  return g;
}


void conv_forward_into(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y,
                       const ConvGeometry& g) {
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) {
    CudaWorkspace ws{x.device(), {}};
    DDP_DISPATCH_FLOATING(x.dtype(), "conv2d", [&] {
      kernels::cuda::conv2d_forward(x.data<scalar_t>(), weight.data<scalar_t>(),
                                    bias.defined() ? bias.data<scalar_t>() : nullptr, y.data<scalar_t>(), g,
                                    ws.fn());
    });
    return;
  }
#endif
  DDP_DISPATCH_FLOATING(x.dtype(), "conv2d", [&] {
    kernels::cpu::conv2d_forward(x.data<scalar_t>(), weight.data<scalar_t>(),
                                 bias.defined() ? bias.data<scalar_t>() : nullptr, y.data<scalar_t>(), g);
  });
}

// Saves x and weight; gradients for x, weight, bias (next_edges 0, 1, 2).
struct Conv2dBackward final : autograd::Node {
  Tensor x, weight;
  ConvGeometry geometry;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& dy = grads[0];
    if (!dy.defined()) return {Tensor(), Tensor(), Tensor()};
    DDP_CHECK(dy.shape() == Shape({geometry.batch, geometry.out_channels, geometry.out_h, geometry.out_w}),
              "conv2d backward: gradient has shape ", shape_str(dy.shape()));
    Tensor dx, dw, db;
    // dw and db straight into their DDP bucket slots where the reducer offers them (autograd/node.h); the
    // kernels overwrite them.
    if (next_edges[0].valid()) dx = Tensor::empty_like(x);
    if (next_edges[1].valid())
      dw = autograd::gradient_destination_or_empty(next_edges[1], weight.shape(), x.dtype(), x.device());
    if (next_edges.size() > 2 && next_edges[2].valid())
      db = autograd::gradient_destination_or_empty(next_edges[2], {geometry.out_channels}, x.dtype(), x.device());
    if (geometry.batch == 0) {  // an empty batch: sums over no images
      if (dw.defined()) dw.zero_();
      if (db.defined()) db.zero_();
      return {dx, dw, db};
    }
    DDP_DISPATCH_FLOATING(x.dtype(), "conv2d backward", [&] {
      auto ptr = [](Tensor& t) { return t.defined() ? t.data<scalar_t>() : nullptr; };
#ifdef DDP_WITH_CUDA
      if (x.device().is_cuda()) {
        CudaWorkspace ws{x.device(), {}};
        kernels::cuda::conv2d_backward(x.data<scalar_t>(), weight.data<scalar_t>(), dy.data<scalar_t>(),
                                       ptr(dx), ptr(dw), ptr(db), geometry, ws.fn());
        return;
      }
#endif
      kernels::cpu::conv2d_backward(x.data<scalar_t>(), weight.data<scalar_t>(), dy.data<scalar_t>(), ptr(dx),
                                    ptr(dw), ptr(db), geometry);
    });
    return {dx, dw, db};
  }
  const char* name() const override { return "conv2d"; }
  void release_saved() override { x = weight = Tensor(); }
};

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding) {
  const ConvGeometry g = conv_geometry(x, weight, bias, stride, padding);
  Tensor y = Tensor::empty({g.batch, g.out_channels, g.out_h, g.out_w}, x.dtype(), x.device());
  if (g.batch > 0) conv_forward_into(x, weight, bias, y, g);
  if (autograd::needs_grad({&x, &weight, &bias})) {
    auto node = std::make_shared<Conv2dBackward>();
    node->x = x;
    node->weight = weight;
    node->geometry = g;
    autograd::record(node, {&x, &weight, &bias}, {&y});
  }
  return y;
}

}  // namespace ddp::ops

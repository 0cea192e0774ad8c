// elementwise.cpp - forward and backward of the broadcasting binary ops and the scalar ops, side by side.
// Backward of a broadcast input sums the gradient over the broadcast dimensions (sum_to_shape).
// CPU kernels: kernels/cpu/broadcast.h; CUDA kernels (same names): kernels/cuda/elementwise.h.
#include "runtime/ops/elementwise.h"

#include "kernels/cpu/broadcast.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/device_kernel.h"

#ifdef DDP_WITH_CUDA
#include "kernels/cuda/elementwise.h"
#endif

namespace ddp::ops {
namespace {
using autograd::Node;
enum class BinOp { Add, Sub, Mul, Div };
const char* bin_name(BinOp op) {
  switch (op) {
    case BinOp::Add:
      return "add";
    case BinOp::Sub:
      return "sub";
    case BinOp::Mul:
      return "mul";
    case BinOp::Div:
      return "div";
  }
  return "?";
}

Shape broadcast_or_fail(const char* what, const Tensor& a, const Tensor& b) {
  DDP_CHECK(a.dtype() == b.dtype(), what, ": dtypes differ (", dtype_name(a.dtype()), " vs ",
            dtype_name(b.dtype()), "); convert one with .to(dtype)");
  DDP_CHECK(a.device() == b.device(), what, ": devices differ (", a.device().str(), " vs ", b.device().str(),
            ")");
  check_device_built(what, a.device());
  bool ok;
  Shape s = kernels::cpu::broadcast_shapes(a.shape(), b.shape(), &ok);
  DDP_CHECK(ok, what, ": shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()), " do not broadcast");
  return s;
}

Tensor binary_forward(BinOp op, const Tensor& a, const Tensor& b, const Shape& out_shape) {
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
#ifdef DDP_WITH_CUDA
  if (a.device().is_cuda()) {
    const kernels::cuda::BinaryOp kop = op == BinOp::Add   ? kernels::cuda::BinaryOp::Add
                                        : op == BinOp::Sub ? kernels::cuda::BinaryOp::Sub
                                        : op == BinOp::Mul ? kernels::cuda::BinaryOp::Mul
                                                           : kernels::cuda::BinaryOp::Div;
    DDP_DISPATCH_FLOATING(a.dtype(), bin_name(op), [&] {
      kernels::cuda::binary_broadcast(kop, a.data<scalar_t>(), a.shape(), b.data<scalar_t>(), b.shape(),
                                      out.data<scalar_t>(), out_shape);
    });
    return out;
  }
#endif
  DDP_DISPATCH_FLOATING(a.dtype(), bin_name(op), [&] {
    const scalar_t* pa = a.data<scalar_t>();
    const scalar_t* pb = b.data<scalar_t>();
    scalar_t* po = out.data<scalar_t>();
    using kernels::cpu::binary_broadcast;
    switch (op) {
      case BinOp::Add:
        binary_broadcast(pa, a.shape(), pb, b.shape(), po, out_shape,
                         [](scalar_t x, scalar_t y) { return x + y; });
        break;
      case BinOp::Sub:
        binary_broadcast(pa, a.shape(), pb, b.shape(), po, out_shape,
                         [](scalar_t x, scalar_t y) { return x - y; });
        break;
      case BinOp::Mul:
        binary_broadcast(pa, a.shape(), pb, b.shape(), po, out_shape,
                         [](scalar_t x, scalar_t y) { return x * y; });
        break;
      case BinOp::Div:
        binary_broadcast(pa, a.shape(), pb, b.shape(), po, out_shape,
                         [](scalar_t x, scalar_t y) { return x / y; });
        break;
    }
  });
  return out;
}

// Sums g (broadcast shape) down to `shape`.
Tensor reduce_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  Tensor out = Tensor::empty(shape, g.dtype(), g.device());
  DDP_DISPATCH_FLOATING(g.dtype(), "sum_to_shape", [&] {
    DDP_KERNEL(g.device(), sum_to_shape, g.data<scalar_t>(), g.shape(), out.data<scalar_t>(), shape);
  });
  return out;
}

struct BinaryBackward final : Node {
  BinOp op;
  Shape a_shape, b_shape;
  Tensor a, b;  // saved only for mul and div
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    Tensor ga, gb;
    const bool need_a = next_edges[0].valid(), need_b = next_edges[1].valid();
    switch (op) {
      case BinOp::Add:
        if (need_a) ga = reduce_to(g, a_shape);
        if (need_b) gb = reduce_to(g, b_shape);
        break;
      case BinOp::Sub:
        if (need_a) ga = reduce_to(g, a_shape);
        if (need_b) gb = reduce_to(neg(g), b_shape);
        break;
      case BinOp::Mul:
        if (need_a) ga = reduce_to(mul(g, b), a_shape);
        if (need_b) gb = reduce_to(mul(g, a), b_shape);
        break;
      case BinOp::Div:  // d(a/b)/da = 1/b, d(a/b)/db = -a/b^2
        if (need_a) ga = reduce_to(div(g, b), a_shape);
        if (need_b) gb = reduce_to(neg(div(mul(g, a), mul(b, b))), b_shape);
        break;
    }
    return {ga, gb};
  }
  const char* name() const override { return bin_name(op); }
  void release_saved() override { a = b = Tensor(); }
};

Tensor binary(BinOp op, const Tensor& a, const Tensor& b) {
  Shape s = broadcast_or_fail(bin_name(op), a, b);
  Tensor out = binary_forward(op, a, b, s);
  if (autograd::needs_grad({&a, &b})) {
    auto node = std::make_shared<BinaryBackward>();
    node->op = op;
    node->a_shape = a.shape();
    node->b_shape = b.shape();
    if (op == BinOp::Mul || op == BinOp::Div) {
      node->a = a;
      node->b = b;
    }
    autograd::record(node, {&a, &b}, {&out});
  }
  return out;
}

// y = alpha * x + beta
Tensor affine_forward(const Tensor& x, double alpha, double beta) {
  check_device_built("scalar op", x.device());
  Tensor out = Tensor::empty_like(x);
  DDP_DISPATCH_FLOATING(x.dtype(), "scalar op", [&] {
#ifdef DDP_WITH_CUDA
    if (x.device().is_cuda()) {
      kernels::cuda::affine(x.data<scalar_t>(), out.data<scalar_t>(), x.numel(), alpha, beta);
      return;
    }
#endif
    const scalar_t* px = x.data<scalar_t>();
    scalar_t* po = out.data<scalar_t>();
    const scalar_t al = static_cast<scalar_t>(alpha), be = static_cast<scalar_t>(beta);
    for (int64_t i = 0, n = x.numel(); i < n; ++i) po[i] = al * px[i] + be;
  });
  return out;
}

struct AffineBackward final : Node {
  double alpha;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    return {alpha == 1.0 ? grads[0] : affine_forward(grads[0], alpha, 0.0)};
  }
  const char* name() const override { return "scalar_affine"; }
};

Tensor affine(const Tensor& x, double alpha, double beta) {
  Tensor out = affine_forward(x, alpha, beta);
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<AffineBackward>();
    node->alpha = alpha;
    autograd::record(node, {&x}, {&out});
  }
  return out;
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinOp::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinOp::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinOp::Div, a, b); }
Tensor add_scalar(const Tensor& a, double s) { return affine(a, 1.0, s); }
Tensor mul_scalar(const Tensor& a, double s) { return affine(a, s, 0.0); }
Tensor neg(const Tensor& a) { return affine(a, -1.0, 0.0); }

}  // namespace ddp::ops

// softmax.cpp - forward and backward of softmax / log-softmax, dispatching to kernels/{cpu,cuda}/softmax.
// Both save only their output: softmax' = y (dy - <y, dy>), log_softmax' = dy - exp(y) sum(dy).
#include "runtime/ops/softmax.h"

#include "kernels/cpu/softmax.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/device_kernel.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cuda/softmax.h"
#endif

namespace ddp::ops {
namespace {
const char* op_name(bool log) { return log ? "log_softmax" : "softmax"; }

void forward_kernel(bool log, const Tensor& x, Tensor& y, int64_t rows, int64_t cols) {
  DDP_DISPATCH_FLOATING(x.dtype(), op_name(log), [&] {
    const scalar_t* px = x.data<scalar_t>();
    scalar_t* py = y.data<scalar_t>();
    if (log)
      DDP_KERNEL_ON_STREAM(x.device(), log_softmax_forward, px, py, rows, cols);
    else
      DDP_KERNEL_ON_STREAM(x.device(), softmax_forward, px, py, rows, cols);
  });
}

void backward_kernel(bool log, const Tensor& y, const Tensor& dy, Tensor& dx, int64_t rows, int64_t cols) {
  DDP_DISPATCH_FLOATING(y.dtype(), op_name(log), [&] {
    const scalar_t* py = y.data<scalar_t>();
    const scalar_t* pdy = dy.data<scalar_t>();
    scalar_t* pdx = dx.data<scalar_t>();
    if (log)
      DDP_KERNEL_ON_STREAM(y.device(), log_softmax_backward, py, pdy, pdx, rows, cols);
    else
      DDP_KERNEL_ON_STREAM(y.device(), softmax_backward, py, pdy, pdx, rows, cols);
  });
}

struct SoftmaxBackward final : autograd::Node {
  bool log = false;
  Tensor y;  // the forward output
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    Tensor dx = Tensor::empty_like(y);
    const int64_t cols = y.size(-1);
    backward_kernel(log, y, grads[0], dx, cols ? y.numel() / cols : 0, cols);
    return {dx};
  }
  const char* name() const override { return op_name(log); }
  void release_saved() override { y = Tensor(); }
};

Tensor softmax_impl(const Tensor& x, bool log) {
  DDP_CHECK(x.defined(), op_name(log), ": the input tensor is undefined");
  DDP_CHECK(x.dim() >= 1, op_name(log),
            ": input of shape () has no last dimension to normalise over; reshape it to (1)");
  const int64_t cols = x.size(-1);
  Tensor y = Tensor::empty_like(x);
  if (x.numel() > 0) forward_kernel(log, x, y, x.numel() / cols, cols);
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<SoftmaxBackward>();
    node->log = log;
    node->y = y.detach();  // a detached handle: saving y itself would make y -> node -> y a cycle
    autograd::record(node, {&x}, {&y});
  }
  return y;
}
}  // namespace

Tensor softmax(const Tensor& x) { return softmax_impl(x, false); }
Tensor log_softmax(const Tensor& x) { return softmax_impl(x, true); }

}  // namespace ddp::ops

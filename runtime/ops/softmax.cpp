// softmax.cpp - forward and backward of softmax / log-softmax, dispatching to kernels/{cpu,cuda}/softmax.
// Both save only their output: softmax' = y (dy - <y, dy>), log_softmax' = dy - exp(y) sum(dy).
#include "runtime/ops/softmax.h"

#include "kernels/cpu/softmax.h"
#include "runtime/autograd/node.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cuda/softmax.h"
#include "runtime/core/cuda/stream.h"
#endif

namespace ddp::ops {
namespace {
const char* op_name(bool log) { return log ? "log_softmax" : "softmax"; }

void forward_kernel(bool log, const Tensor& x, Tensor& y, int64_t rows, int64_t cols) {
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) {
    DDP_DISPATCH_FLOATING(x.dtype(), op_name(log), [&] {
      if (log)
        kernels::cuda::log_softmax_forward(x.data<scalar_t>(), y.data<scalar_t>(), rows, cols,
                                           cuda::current_stream());
      else
        kernels::cuda::softmax_forward(x.data<scalar_t>(), y.data<scalar_t>(), rows, cols,
                                       cuda::current_stream());
    });
    return;
  }
#endif
  DDP_CHECK(x.device().is_cpu(), op_name(log), " on ", x.device().str(), " is not available in this build");
  DDP_DISPATCH_FLOATING(x.dtype(), op_name(log), [&] {
    if (log)
      kernels::cpu::log_softmax_forward(x.data<scalar_t>(), y.data<scalar_t>(), rows, cols);
    else
      kernels::cpu::softmax_forward(x.data<scalar_t>(), y.data<scalar_t>(), rows, cols);
  });
}

void backward_kernel(bool log, const Tensor& y, const Tensor& dy, Tensor& dx, int64_t rows, int64_t cols) {
#ifdef DDP_WITH_CUDA
  if (y.device().is_cuda()) {
    DDP_DISPATCH_FLOATING(y.dtype(), op_name(log), [&] {
      const scalar_t* py = y.data<scalar_t>();
      const scalar_t* pdy = dy.data<scalar_t>();
      scalar_t* pdx = dx.data<scalar_t>();
      if (log)
        kernels::cuda::log_softmax_backward(py, pdy, pdx, rows, cols, cuda::current_stream());
      else
        kernels::cuda::softmax_backward(py, pdy, pdx, rows, cols, cuda::current_stream());
    });
    return;
  }
#endif
  DDP_DISPATCH_FLOATING(y.dtype(), op_name(log), [&] {
    if (log)
      kernels::cpu::log_softmax_backward(y.data<scalar_t>(), dy.data<scalar_t>(), dx.data<scalar_t>(), rows,
                                         cols);
    else
      kernels::cpu::softmax_backward(y.data<scalar_t>(), dy.data<scalar_t>(), dx.data<scalar_t>(), rows,
                                     cols);
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

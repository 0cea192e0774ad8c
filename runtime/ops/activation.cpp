// activation.cpp - forward and backward of the pointwise activations. One node type serves all of them: it
// saves the input (relu, gelu, log) or the output (tanh, sigmoid, exp), whichever the derivative reads.
#include "runtime/ops/activation.h"

#include "kernels/cpu/activation.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/device_kernel.h"

#ifdef DDP_WITH_CUDA
#include "kernels/cuda/activation.h"
#endif

namespace ddp::ops {
namespace {
enum class Act { Relu, Gelu, Tanh, Sigmoid, Exp, Log };

const char* act_name(Act a) {
  switch (a) {
    case Act::Relu:
      return "relu";
    case Act::Gelu:
      return "gelu";
    case Act::Tanh:
      return "tanh";
    case Act::Sigmoid:
      return "sigmoid";
    case Act::Exp:
      return "exp";
    case Act::Log:
      return "log";
  }
  return "?";
}
// True when the backward reads the op's output y rather than its input x.
bool backward_uses_output(Act a) { return a == Act::Tanh || a == Act::Sigmoid || a == Act::Exp; }

template <class T>
void run_forward(Act a, Device dev, const T* x, T* y, int64_t n) {
  switch (a) {
    case Act::Relu:
      return DDP_KERNEL(dev, relu_forward, x, y, n);
    case Act::Gelu:
      return DDP_KERNEL(dev, gelu_forward, x, y, n);
    case Act::Tanh:
      return DDP_KERNEL(dev, tanh_forward, x, y, n);
    case Act::Sigmoid:
      return DDP_KERNEL(dev, sigmoid_forward, x, y, n);
    case Act::Exp:
      return DDP_KERNEL(dev, exp_forward, x, y, n);
    case Act::Log:
      return DDP_KERNEL(dev, log_forward, x, y, n);
  }
}

// saved is x or y, see backward_uses_output.
template <class T>
void run_backward(Act a, Device dev, const T* g, const T* saved, T* dx, int64_t n) {
  switch (a) {
    case Act::Relu:
      return DDP_KERNEL(dev, relu_backward, g, saved, dx, n);
    case Act::Gelu:
      return DDP_KERNEL(dev, gelu_backward, g, saved, dx, n);
    case Act::Tanh:
      return DDP_KERNEL(dev, tanh_backward, g, saved, dx, n);
    case Act::Sigmoid:
      return DDP_KERNEL(dev, sigmoid_backward, g, saved, dx, n);
    case Act::Exp:
      return DDP_KERNEL(dev, exp_backward, g, saved, dx, n);
    case Act::Log:
      return DDP_KERNEL(dev, log_backward, g, saved, dx, n);
  }
}

struct ActivationBackward final : autograd::Node {
  Act act;
  Tensor saved;  // x or y, see backward_uses_output
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    if (!g.defined()) return {};
    Tensor dx = Tensor::empty_like(saved);
    DDP_DISPATCH_FLOATING(g.dtype(), act_name(act), [&] {
      run_backward<scalar_t>(act, g.device(), g.data<scalar_t>(), saved.data<scalar_t>(), dx.data<scalar_t>(),
                             g.numel());
    });
    return {dx};
  }
  const char* name() const override { return act_name(act); }
  void release_saved() override { saved = Tensor(); }
};

Tensor activation(Act act, const Tensor& x) {
  DDP_CHECK(x.defined(), act_name(act), ": input is undefined");
  check_device_built(act_name(act), x.device());
  Tensor y = Tensor::empty_like(x);
  DDP_DISPATCH_FLOATING(x.dtype(), act_name(act), [&] {
    run_forward<scalar_t>(act, x.device(), x.data<scalar_t>(), y.data<scalar_t>(), x.numel());
  });
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<ActivationBackward>();
    node->act = act;
    node->saved = backward_uses_output(act) ? y.detach() : x;
    autograd::record(node, {&x}, {&y});
  }
  return y;
}
}  // namespace

Tensor relu(const Tensor& x) { return activation(Act::Relu, x); }
Tensor gelu(const Tensor& x) { return activation(Act::Gelu, x); }
Tensor tanh(const Tensor& x) { return activation(Act::Tanh, x); }
Tensor sigmoid(const Tensor& x) { return activation(Act::Sigmoid, x); }
Tensor exp(const Tensor& x) { return activation(Act::Exp, x); }
Tensor log(const Tensor& x) { return activation(Act::Log, x); }

}  // namespace ddp::ops

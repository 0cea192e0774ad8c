// optimizer.h - SGD (momentum, dampening, weight decay, nesterov) and AdamW with PyTorch's update rules.
// Both skip parameters whose grad is none (a parameter no rank used in DDP keeps grad none); their state is
// exposed by name for checkpoints. clip_grad_norm_ scales all gradients to a global L2 norm. On CUDA a step
// is one multi-tensor launch per dtype for all parameters (kernels/cuda/multi_tensor.h), with the per-element
// math of the single-tensor kernels.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "runtime/nn/module.h"

namespace ddp::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<nn::NamedTensor> params, double lr) : params_(std::move(params)), lr_(lr) {}
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  // set_to_none (PyTorch's default): grads become none, the next backward allocates new ones. false: grads
  // are zeroed in place and keep their memory - with DDP's gradient_as_bucket_view they stay views of the
  // bucket buffers, so a step allocates and copies no gradient at all.
  void zero_grad(bool set_to_none = true);
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  int64_t steps() const { return steps_; }
  // State tensors by "<param name>.<state name>" (e.g. "fc1.weight.momentum_buffer"), plus the step count.
  virtual std::map<std::string, Tensor> state() const = 0;
  virtual void load_state(const std::map<std::string, Tensor>& state, int64_t steps) = 0;
  const std::vector<nn::NamedTensor>& params() const { return params_; }

 protected:
  std::vector<nn::NamedTensor> params_;
  double lr_;
  int64_t steps_ = 0;
};

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<nn::NamedTensor> params, SGDOptions options);
  void step() override;
  std::map<std::string, Tensor> state() const override;
  void load_state(const std::map<std::string, Tensor>& state, int64_t steps) override;

 private:
  SGDOptions opt_;
  std::vector<Tensor> momentum_;  // undefined until the parameter's first step with a gradient
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<nn::NamedTensor> params, AdamWOptions options);
  void step() override;
  std::map<std::string, Tensor> state() const override;
  void load_state(const std::map<std::string, Tensor>& state, int64_t steps) override;

 private:
  AdamWOptions opt_;
  std::vector<Tensor> m_, v_;
  std::vector<int64_t> param_steps_;  // per-parameter step counts (a skipped parameter does not advance)
};

// Scales every defined gradient so that their global L2 norm is at most max_norm (by max_norm / (norm + 1e-6)
// when norm > max_norm); returns the norm before. On CUDA the whole clip runs on the device (multi-tensor
// kernels, a deterministic reduction in double) and this reads the norm back (one 8-byte copy and a wait).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);
// The same clip, returning the norm before it as a float64 scalar tensor on the gradients' device (the CPU
// when none is defined) without reading it: on CUDA the host waits for nothing. The gradients must share one
// device.
Tensor clip_grad_norm_tensor_(const std::vector<Tensor>& params, double max_norm);

}  // namespace ddp::optim

// optimizer.cpp - the update rules (fused kernels: kernels/cpu/optim and kernels/cuda/optim), state export,
// clipping.
#include "runtime/optim/optimizer.h"

#include <cmath>

#include "kernels/cpu/optim.h"
#include "runtime/autograd/node.h"
#include "runtime/optim/state_check.h"
#include "runtime/tensor/tensor_math.h"

#ifdef DDP_WITH_CUDA
#include "kernels/cuda/optim.h"
#include "runtime/core/cuda/stream.h"
#endif

namespace ddp::optim {

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& p : params_) {
    if (set_to_none) {
      p.tensor.impl()->grad.reset();
    } else if (p.tensor.impl()->grad) {
      p.tensor.grad().zero_();
    }
  }
}

SGD::SGD(std::vector<nn::NamedTensor> params, SGDOptions options)
    : Optimizer(std::move(params), options.lr), opt_(options), momentum_(params_.size()) {
  DDP_CHECK(opt_.lr >= 0, "SGD: lr must be >= 0 (got ", opt_.lr, ")");
  DDP_CHECK(!opt_.nesterov || (opt_.momentum > 0 && opt_.dampening == 0),
            "SGD: nesterov needs momentum > 0 and dampening 0");
}

void SGD::step() {
  autograd::NoGradGuard ng;
  ++steps_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor p = params_[i].tensor;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    const bool first = !momentum_[i].defined();
    if (opt_.momentum != 0 && first) momentum_[i] = Tensor::zeros(p.shape(), p.dtype(), p.device());
#ifdef DDP_WITH_CUDA
    if (p.device().is_cuda()) {
      kernels::cuda::sgd_step(p.raw_data(), g.raw_data(),
                              momentum_[i].defined() ? momentum_[i].raw_data() : nullptr, p.dtype(),
                              p.numel(), lr_, opt_.momentum, opt_.dampening, opt_.weight_decay, opt_.nesterov,
                              first, cuda::current_stream());
      continue;
    }
#endif
    DDP_DISPATCH_FLOATING(p.dtype(), "SGD", [&] {
      kernels::cpu::sgd_step(p.data<scalar_t>(), g.data<scalar_t>(),
                             momentum_[i].defined() ? momentum_[i].data<scalar_t>() : nullptr, p.numel(), lr_,
                             opt_.momentum, opt_.dampening, opt_.weight_decay, opt_.nesterov, first);
    });
  }
}

std::map<std::string, Tensor> SGD::state() const {
  std::map<std::string, Tensor> s;
  for (size_t i = 0; i < params_.size(); ++i)
    if (momentum_[i].defined()) s[params_[i].name + ".momentum_buffer"] = momentum_[i];
  return s;
}

void SGD::load_state(const std::map<std::string, Tensor>& state, int64_t steps) {
  check_whole_state("SGD::load_state", params_, state_kinds_of(*this), state, steps);  // all before any
  steps_ = steps;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto it = state.find(params_[i].name + ".momentum_buffer");
    momentum_[i] = it == state.end() ? Tensor() : it->second.to(params_[i].tensor.device()).clone();
  }
}

AdamW::AdamW(std::vector<nn::NamedTensor> params, AdamWOptions options)
    : Optimizer(std::move(params), options.lr),
      opt_(options),
      m_(params_.size()),
      v_(params_.size()),
      param_steps_(params_.size(), 0) {
  DDP_CHECK(
      opt_.lr >= 0 && opt_.eps > 0 && opt_.beta1 >= 0 && opt_.beta1 < 1 && opt_.beta2 >= 0 && opt_.beta2 < 1,
      "AdamW: need lr >= 0, eps > 0, 0 <= beta < 1");
}

void AdamW::step() {
  autograd::NoGradGuard ng;
  ++steps_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor p = params_[i].tensor;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!m_[i].defined()) {
      m_[i] = Tensor::zeros(p.shape(), p.dtype(), p.device());
      v_[i] = Tensor::zeros(p.shape(), p.dtype(), p.device());
    }
    const int64_t t = ++param_steps_[i];
    const double bc1 = 1 - std::pow(opt_.beta1, static_cast<double>(t));
    const double bc2 = 1 - std::pow(opt_.beta2, static_cast<double>(t));
#ifdef DDP_WITH_CUDA
    if (p.device().is_cuda()) {
      kernels::cuda::adamw_step(p.raw_data(), g.raw_data(), m_[i].raw_data(), v_[i].raw_data(), p.dtype(),
                                p.numel(), lr_, opt_.beta1, opt_.beta2, opt_.eps, opt_.weight_decay, bc1, bc2,
                                cuda::current_stream());
      continue;
    }
#endif
    DDP_DISPATCH_FLOATING(p.dtype(), "AdamW", [&] {
      kernels::cpu::adamw_step(p.data<scalar_t>(), g.data<scalar_t>(), m_[i].data<scalar_t>(),
                               v_[i].data<scalar_t>(), p.numel(), lr_, opt_.beta1, opt_.beta2, opt_.eps,
                               opt_.weight_decay, bc1, bc2);
    });
  }
}

std::map<std::string, Tensor> AdamW::state() const {
  std::map<std::string, Tensor> s;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!m_[i].defined()) continue;
    s[params_[i].name + ".exp_avg"] = m_[i];
    s[params_[i].name + ".exp_avg_sq"] = v_[i];
    s[params_[i].name + ".step"] = Tensor::from_data<int64_t>({param_steps_[i]}, {});
  }
  return s;
}

void AdamW::load_state(const std::map<std::string, Tensor>& state, int64_t steps) {
  // All checked before any is taken: each parameter's three entries come together or not at all.
  check_whole_state("AdamW::load_state", params_, state_kinds_of(*this), state, steps);
  steps_ = steps;
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string& n = params_[i].name;
    auto im = state.find(n + ".exp_avg"), iv = state.find(n + ".exp_avg_sq"), is = state.find(n + ".step");
    if (im == state.end()) {
      m_[i] = v_[i] = Tensor();
      param_steps_[i] = 0;
      continue;
    }
    const Tensor& p = params_[i].tensor;
    m_[i] = im->second.to(p.device()).clone();
    v_[i] = iv->second.to(p.device()).clone();
    param_steps_[i] = static_cast<int64_t>(is->second.item());
  }
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  double total = 0;
  for (const Tensor& p : params)
    if (p.grad().defined()) total += sum_of_squares(p.grad());
  const double norm = std::sqrt(total);
  if (norm > max_norm && norm > 0) {
    const double scale = max_norm / (norm + 1e-6);
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (g.defined()) scale_(g, scale);
    }
  }
  return norm;
}

}  // namespace ddp::optim

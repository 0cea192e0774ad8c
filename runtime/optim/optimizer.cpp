// optimizer.cpp - the update rules (fused kernels: kernels/cpu/optim and kernels/cuda/optim), state export,
// clipping. On CUDA the parameters of a step are gathered per dtype and stepped by one multi-tensor launch
// (kernels/cuda/multi_tensor.h); on the CPU each parameter runs the fused CPU kernel.
#include "runtime/optim/optimizer.h"

#include <cmath>

#include "kernels/cpu/optim.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/bf16_weight_cast.h"
#include "runtime/optim/state_check.h"
#include "runtime/tensor/multi_tensor_math.h"

#ifdef DDP_WITH_CUDA
#include "kernels/cuda/multi_tensor.h"
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
  ops::check_no_bf16_weight_cast("SGD::step");
  autograd::NoGradGuard ng;
  ++steps_;
#ifdef DDP_WITH_CUDA
  struct Group {  // the CUDA parameters of one dtype, in parameter order
    std::vector<void*> params, momentum;
    std::vector<const void*> grads;
    std::vector<uint8_t> first;
    std::vector<int64_t> sizes;
  } cuda_groups[2];
#endif
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor p = params_[i].tensor;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    const bool first = !momentum_[i].defined();
    if (opt_.momentum != 0 && first) momentum_[i] = Tensor::zeros(p.shape(), p.dtype(), p.device());
#ifdef DDP_WITH_CUDA
    if (p.device().is_cuda()) {
      DDP_CHECK(p.dtype() == DType::F32 || p.dtype() == DType::F64, "SGD on CUDA: parameter '",
                params_[i].name, "' has dtype ", dtype_name(p.dtype()), "; float32 or float64 only");
      Group& gr = cuda_groups[p.dtype() == DType::F64];
      gr.params.push_back(p.raw_data());
      gr.grads.push_back(g.raw_data());
      gr.momentum.push_back(momentum_[i].defined() ? momentum_[i].raw_data() : nullptr);
      gr.first.push_back(first);
      gr.sizes.push_back(p.numel());
      continue;
    }
#endif
    DDP_DISPATCH_FLOATING(p.dtype(), "SGD", [&] {
      kernels::cpu::sgd_step(p.data<scalar_t>(), g.data<scalar_t>(),
                             momentum_[i].defined() ? momentum_[i].data<scalar_t>() : nullptr, p.numel(), lr_,
                             opt_.momentum, opt_.dampening, opt_.weight_decay, opt_.nesterov, first);
    });
  }
#ifdef DDP_WITH_CUDA
  for (int k = 0; k < 2; ++k)
    if (!cuda_groups[k].sizes.empty())
      kernels::cuda::multi_tensor_sgd_step(
          cuda_groups[k].params, cuda_groups[k].grads, cuda_groups[k].momentum, cuda_groups[k].first,
          cuda_groups[k].sizes, k ? DType::F64 : DType::F32, lr_, opt_.momentum, opt_.dampening,
          opt_.weight_decay, opt_.nesterov, cuda::current_stream());
#endif
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
  ops::check_no_bf16_weight_cast("AdamW::step");
  autograd::NoGradGuard ng;
  ++steps_;
#ifdef DDP_WITH_CUDA
  struct Group {  // the CUDA parameters of one dtype, in parameter order, with their own bias corrections
    std::vector<void*> params, m, v;
    std::vector<const void*> grads;
    std::vector<int64_t> sizes;
    std::vector<double> bc1, bc2;
  } cuda_groups[2];
#endif
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
      DDP_CHECK(p.dtype() == DType::F32 || p.dtype() == DType::F64, "AdamW on CUDA: parameter '",
                params_[i].name, "' has dtype ", dtype_name(p.dtype()), "; float32 or float64 only");
      Group& gr = cuda_groups[p.dtype() == DType::F64];
      gr.params.push_back(p.raw_data());
      gr.grads.push_back(g.raw_data());
      gr.m.push_back(m_[i].raw_data());
      gr.v.push_back(v_[i].raw_data());
      gr.sizes.push_back(p.numel());
      gr.bc1.push_back(bc1);
      gr.bc2.push_back(bc2);
      continue;
    }
#endif
    DDP_DISPATCH_FLOATING(p.dtype(), "AdamW", [&] {
      kernels::cpu::adamw_step(p.data<scalar_t>(), g.data<scalar_t>(), m_[i].data<scalar_t>(),
                               v_[i].data<scalar_t>(), p.numel(), lr_, opt_.beta1, opt_.beta2, opt_.eps,
                               opt_.weight_decay, bc1, bc2);
    });
  }
#ifdef DDP_WITH_CUDA
  for (int k = 0; k < 2; ++k) {
    const Group& gr = cuda_groups[k];
    if (!gr.sizes.empty())
      kernels::cuda::multi_tensor_adamw_step(
          gr.params, gr.grads, gr.m, gr.v, gr.sizes, k ? DType::F64 : DType::F32, lr_, opt_.beta1, opt_.beta2,
          opt_.eps, opt_.weight_decay, gr.bc1, gr.bc2, cuda::current_stream());
  }
#endif
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

Tensor clip_grad_norm_tensor_(const std::vector<Tensor>& params, double max_norm) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  const Device device = grads.empty() ? Device::cpu() : grads.front().device();
  for (const Tensor& g : grads)
    DDP_CHECK(g.device() == device, "clip_grad_norm_: gradients on ", device.str(), " and ", g.device().str(),
              "; clip the parameters of each device separately");
  return clip_by_sum_of_squares_(grads, sum_of_squares_tensor(grads, device), max_norm, device);
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  return clip_grad_norm_tensor_(params, max_norm).item();
}

}  // namespace ddp::optim

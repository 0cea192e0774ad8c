// module.cpp - parameter/buffer registration and traversal, device/dtype moves, init seeding.
#include "runtime/nn/module.h"

#include <algorithm>
#include <random>
#include <unordered_set>

namespace ddp::nn {

namespace {
thread_local std::mt19937_64 t_init_gen{0x5eed};
}

void manual_seed(uint64_t seed) { t_init_gen.seed(seed); }
uint64_t next_init_seed() { return t_init_gen(); }

Tensor Module::forward(const Tensor&) {
  DDP_FAIL("this module has no single-input forward(); call its own forward method");
}

void Module::add_forward_hooks(const void* owner, ForwardPreHook pre, ForwardPostHook post) {
  forward_hooks_.push_back({owner, std::move(pre), std::move(post)});
}

void Module::remove_forward_hooks(const void* owner) {
  std::erase_if(forward_hooks_, [owner](const ForwardHooks& h) { return h.owner == owner; });
}

bool Module::has_forward_post_hooks() const {
  return std::any_of(forward_hooks_.begin(), forward_hooks_.end(),
                     [](const ForwardHooks& h) { return bool(h.post); });
}

void Module::run_forward_pre_hooks() {
  for (auto& h : forward_hooks_)
    if (h.pre) h.pre(*this);
}

Tensor Module::forward_with_hooks(const Tensor& x) {
  for (auto& h : forward_hooks_)
    if (h.pre) h.pre(*this);
  Tensor y = forward(x);
  for (auto& h : forward_hooks_)
    if (h.post) y = h.post(*this, y);
  return y;
}

Tensor& Module::register_parameter(const std::string& name, Tensor t) {
  t.set_requires_grad(true);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

void Module::collect(const std::string& prefix, bool params, std::vector<NamedTensor>& out) const {
  for (auto& [n, t] : params ? params_ : buffers_) out.push_back({prefix + n, t});
  for (auto& [n, m] : children_) m->collect(prefix + n + ".", params, out);
}

std::vector<NamedTensor> Module::named_parameters() const {
  std::vector<NamedTensor> out;
  collect("", true, out);
  // A tensor registered in two places (tied weights) is one parameter, under its first name (as PyTorch's
  // named_parameters): one gradient, one optimizer state, one bucket slot.
  std::unordered_set<const TensorImpl*> seen;
  seen.reserve(out.size());
  std::erase_if(out, [&seen](const NamedTensor& nt) { return !seen.insert(nt.tensor.impl()).second; });
  for (auto& nt : out)
    if (nt.tensor.name().empty()) nt.tensor.set_name(nt.name);
  return out;
}

std::vector<NamedTensor> Module::named_buffers() const {
  std::vector<NamedTensor> out;
  collect("", false, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& nt : named_parameters()) out.push_back(nt.tensor);
  return out;
}

std::vector<Tensor> Module::buffers() const {
  std::vector<Tensor> out;
  for (auto& nt : named_buffers()) out.push_back(nt.tensor);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& nt : named_parameters()) n += nt.tensor.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
}

namespace {
// Replaces the storage of t in place with a converted copy, so every handle to t sees the new data.
void replace_in_place(const Tensor& t, const Tensor& converted) {
  TensorImpl* impl = t.impl();
  impl->storage = converted.storage();
  impl->offset = 0;
  impl->dtype = converted.dtype();
  impl->grad.reset();
}
}  // namespace

void Module::to(Device device) {
  for (auto& [n, t] : params_)
    if (t.device() != device) replace_in_place(t, t.detach().to(device));
  for (auto& [n, t] : buffers_)  // integer buffers (generator states) stay on the host
    if (dtype_is_floating(t.dtype()) && t.device() != device) replace_in_place(t, t.detach().to(device));
  for (auto& [n, m] : children_) m->to(device);
}

void Module::to(DType dtype) {
  for (auto& [n, t] : params_)
    if (t.dtype() != dtype) replace_in_place(t, t.detach().to(dtype));
  for (auto& [n, t] : buffers_)
    if (dtype_is_floating(t.dtype()) && t.dtype() != dtype) replace_in_place(t, t.detach().to(dtype));
  for (auto& [n, m] : children_) m->to(dtype);
}

void Module::replace_child(const std::string& name, std::shared_ptr<Module> m) {
  DDP_CHECK(m != nullptr, "Module::replace_child(", name, "): the new module is null");
  for (auto& [n, c] : children_)
    if (n == name) {
      c = std::move(m);
      return;
    }
  DDP_FAIL("Module::replace_child: no child named '", name, "'");
}

void Module::zero_grad() {
  for (auto& nt : named_parameters()) nt.tensor.impl()->grad.reset();
}

}  // namespace ddp::nn

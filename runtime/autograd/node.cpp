// node.cpp - node creation order, grad mode, the leaf accumulator and the helpers ops use to record history.
#include "runtime/autograd/node.h"

#include <atomic>

#include "runtime/autograd/engine.h"
#include "runtime/tensor/tensor_math.h"

namespace ddp::autograd {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
thread_local bool t_grad_enabled = true;
}  // namespace

Node::Node() : sequence_nr(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

bool grad_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = prev_; }
EnableGradGuard::EnableGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { t_grad_enabled = prev_; }

Tensor gradient_destination(const Edge& e, const Shape& shape, DType dtype, Device device) {
  if (!e.node) return {};
  NodeTask* task = current_node_task(e.node.get());
  if (!task || task->pending != 1 || task->input_buffer.empty() || task->input_buffer[0].defined()) return {};
  auto* acc = dynamic_cast<AccumulateGrad*>(e.node.get());
  if (!acc || destination_outstanding(acc)) return {};
  TensorImpl& leaf = *acc->variable();
  if (leaf.grad || !leaf.grad_destination.second) return {};
  Tensor d(leaf.grad_destination.second());
  if (!d.defined() || d.dtype() != dtype || d.device() != device || d.numel() != shape_numel(shape))
    return {};
  task->handed_out = d;
  return d.view(shape);
}

Tensor gradient_destination_or_empty(const Edge& e, const Shape& shape, DType dtype, Device device) {
  Tensor d = gradient_destination(e, shape, dtype, device);
  return d.defined() ? d : Tensor::empty(shape, dtype, device);
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> variable) : variable_(std::move(variable)) {}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>& grad_outputs) {
  Tensor g = std::move(grad_outputs[0]);  // moved, so an unshared gradient can be stolen below
  NodeTask* task = current_node_task(this);
  const Tensor handed_out = task ? std::move(task->handed_out) : Tensor();
  if (g.defined()) {
    TensorImpl& v = *variable_;
    DDP_CHECK(shape_numel(v.shape) == g.numel(), "gradient of ", (v.name.empty() ? "a parameter" : v.name),
              " has shape ", shape_str(g.shape()), " but the parameter has shape ", shape_str(v.shape));
    if (!v.grad && handed_out.defined() && g.storage() == handed_out.storage() &&
        g.impl()->offset == handed_out.impl()->offset && g.numel() == handed_out.numel()) {
      v.grad = g.view(v.shape).impl_ptr();  // backward wrote it into the destination: nothing to copy
    } else if (!v.grad) {
      // Take the incoming tensor over only when nothing else can see its memory: no other handle to its
      // TensorImpl AND no other TensorImpl on its storage (a view, e.g. the same gradient handed by an add's
      // backward to two reshape backwards). Otherwise copy, so that no two .grad ever alias.
      const bool unshared = g.impl_ptr().use_count() == 1 && g.storage() && g.storage().use_count() == 1;
      Tensor owned = unshared ? g : g.clone();
      v.grad = owned.view(v.shape).impl_ptr();
    } else {
      Tensor acc(v.grad);
      add_(acc, g);
    }
  }
  for (auto& [owner, hook] : variable_->post_accumulate_hooks) hook(*variable_);
  return {};
}

Edge edge_of(const Tensor& t) {
  if (!t.defined()) return {};
  if (t.impl()->grad_fn) return {t.impl()->grad_fn, t.impl()->output_nr};
  if (t.impl()->requires_grad) return {accumulator_of(t), 0};
  return {};
}

std::shared_ptr<AccumulateGrad> accumulator_of(const Tensor& leaf) {
  TensorImpl* impl = leaf.impl();
  if (auto existing = impl->grad_accumulator.lock())
    return std::static_pointer_cast<AccumulateGrad>(existing);
  auto acc = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
  impl->grad_accumulator = acc;
  return acc;
}

void record(const std::shared_ptr<Node>& node, const std::vector<const Tensor*>& inputs,
            const std::vector<Tensor*>& outputs) {
  node->next_edges.clear();
  node->next_edges.reserve(inputs.size());
  for (const Tensor* t : inputs) node->next_edges.push_back(t ? edge_of(*t) : Edge{});
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i] || !outputs[i]->defined()) continue;
    outputs[i]->impl()->grad_fn = node;
    outputs[i]->impl()->output_nr = static_cast<uint32_t>(i);
  }
}

void record(const std::shared_ptr<Node>& node, std::initializer_list<const Tensor*> inputs,
            std::initializer_list<Tensor*> outputs) {
  record(node, std::vector<const Tensor*>(inputs), std::vector<Tensor*>(outputs));
}

}  // namespace ddp::autograd

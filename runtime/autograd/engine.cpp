// engine.cpp - the backward engine: dependency counting, a ready queue ordered newest-first, gradient
// summation per node input, saved-tensor release, and end-of-backward callbacks.
#include "runtime/autograd/engine.h"

#include <atomic>
#include <queue>

#include "runtime/tensor/tensor_math.h"

namespace ddp::autograd {

namespace {
std::atomic<uint64_t> g_epoch{0};
uint64_t new_epoch() { return g_epoch.fetch_add(1, std::memory_order_relaxed) + 1; }

struct BackwardState {
  std::vector<std::function<void()>> callbacks;
  BackwardState* outer = nullptr;  // the backward this one runs inside (nested), if any
};
thread_local BackwardState* t_state = nullptr;

// Adds g into slot (copy-on-second-contribution, so no caller's tensor is modified in place).
void accumulate(Tensor& slot, const Tensor& g) {
  if (!slot.defined()) {
    slot = g;
    return;
  }
  Tensor sum = slot.clone();
  add_(sum, g);
  slot = sum;
}

struct NewestFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};
}  // namespace

void queue_end_of_outermost_backward_callback(std::function<void()> fn) {
  DDP_CHECK(t_state != nullptr, "queue_end_of_outermost_backward_callback called outside of a backward pass");
  BackwardState* s = t_state;
  while (s->outer) s = s->outer;
  s->callbacks.push_back(std::move(fn));
}

bool in_backward() { return t_state != nullptr; }

void queue_end_of_backward_callback(std::function<void()> fn) {
  DDP_CHECK(t_state != nullptr, "queue_end_of_backward_callback called outside of a backward pass");
  t_state->callbacks.push_back(std::move(fn));
}

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              BackwardOptions options) {
  DDP_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "backward: ", outputs.size(),
            " outputs but ", grad_outputs.size(), " gradients");
  const uint64_t epoch = new_epoch();
  std::vector<Edge> roots;
  std::vector<Tensor> seeds;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    DDP_CHECK(out.defined() && out.requires_grad(), "backward: output ", i,
              " does not require grad (no parameter or input with requires_grad took part in computing it)");
    Tensor seed = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!seed.defined()) {
      DDP_CHECK(out.numel() == 1, "backward: output ", i, " has shape ", shape_str(out.shape()),
                "; a gradient must be given for a non-scalar output");
      seed = Tensor::ones(out.shape(), out.dtype(), out.device());
    }
    roots.push_back(edge_of(out));
    seeds.push_back(seed);
  }

  // 1) mark the graph and count, for each node, the edges that will bring it a gradient.
  std::vector<Node*> stack;
  auto discover = [&](Node* n) {
    if (n->visit_mark == epoch) return;
    n->visit_mark = epoch;
    n->pending = 0;
    n->input_buffer.assign(n->num_outputs, Tensor());
    stack.push_back(n);
  };
  for (auto& r : roots) discover(r.node.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& e : n->next_edges) {
      if (!e.node) continue;
      discover(e.node.get());
      e.node->pending++;
    }
  }
  // 2) seed the roots and queue those that wait on nothing else.
  for (size_t i = 0; i < roots.size(); ++i)
    accumulate(roots[i].node->input_buffer[roots[i].input_nr], seeds[i]);
  std::priority_queue<Node*, std::vector<Node*>, NewestFirst> ready;
  for (auto& r : roots) {
    if (r.node->pending == 0) {
      r.node->pending = -1;  // queued
      ready.push(r.node.get());
    }
  }

  BackwardState state;
  BackwardState* outer = t_state;
  state.outer = outer;
  t_state = &state;
  struct Restore {
    BackwardState* outer;
    ~Restore() { t_state = outer; }
  } restore{outer};

  // Keep the root nodes alive for the whole pass (outputs may be temporaries).
  std::vector<std::shared_ptr<Node>> keep;
  for (auto& r : roots) keep.push_back(r.node);

  // 3) run nodes as they become ready (gradient computations themselves are not recorded).
  NoGradGuard no_grad;
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(n->input_buffer);
    n->input_buffer.clear();
    std::vector<Tensor> input_grads = n->apply(grads);
    grads.clear();
    if (!options.retain_graph) n->release_saved();
    DDP_CHECK(input_grads.size() == n->next_edges.size() || input_grads.empty(), n->name(), " returned ",
              input_grads.size(), " gradients for ", n->next_edges.size(), " inputs");
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      Edge& e = n->next_edges[i];
      if (!e.node) continue;
      if (!input_grads.empty() && input_grads[i].defined())
        accumulate(e.node->input_buffer[e.input_nr], input_grads[i]);
      if (--e.node->pending == 0) {
        e.node->pending = -1;
        ready.push(e.node.get());
      }
    }
  }

  // 4) end-of-backward callbacks (may queue more callbacks).
  for (size_t i = 0; i < state.callbacks.size(); ++i) {
    auto cb = std::move(state.callbacks[i]);
    cb();
  }
}

void for_each_reachable_leaf(const std::vector<Tensor>& outputs,
                             const std::function<void(TensorImpl*)>& visit) {
  const uint64_t epoch = new_epoch();
  std::vector<Node*> stack;
  for (const Tensor& out : outputs) {
    if (!out.defined()) continue;
    if (out.impl()->grad_fn) {
      Node* n = out.impl()->grad_fn.get();
      if (n->visit_mark != epoch) {
        n->visit_mark = epoch;
        stack.push_back(n);
      }
    } else if (out.impl()->requires_grad) {
      visit(out.impl());
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (auto* acc = dynamic_cast<AccumulateGrad*>(n)) {
      visit(acc->variable().get());
      continue;
    }
    for (auto& e : n->next_edges) {
      if (!e.node || e.node->visit_mark == epoch) continue;
      e.node->visit_mark = epoch;
      stack.push_back(e.node.get());
    }
  }
}

}  // namespace ddp::autograd

// engine.cpp - the backward engine: dependency counting, a ready queue ordered newest-first, gradient
// summation per node input, saved-tensor release, and end-of-backward callbacks, all state of one backward
// call in its GraphTask (nested backwards each have their own).
#include "runtime/autograd/engine.h"

#include <atomic>
#include <queue>
#include <unordered_map>

#include "runtime/tensor/tensor_math.h"

namespace ddp::autograd {

namespace {
std::atomic<uint64_t> g_epoch{0};
uint64_t new_epoch() { return g_epoch.fetch_add(1, std::memory_order_relaxed) + 1; }

// The state of one backward call: every node it reaches with its NodeTask, its end-of-backward callbacks,
// and the backward it runs inside (nested), if any.
struct GraphTask {
  std::unordered_map<const Node*, NodeTask> nodes;
  std::vector<std::function<void()>> callbacks;
  GraphTask* outer = nullptr;
  bool retain_graph = false;
};
thread_local GraphTask* t_state = nullptr;

// Adds g into slot (copy-on-second-contribution, so no caller's tensor is modified in place). The gradients
// of a bfloat16 tensor used twice (bf16 compute's logits in two losses, say: runtime/ops/mixed_precision.h)
// are added in float32 and the sum rounded to bf16 again.
void accumulate(Tensor& slot, const Tensor& g) {
  if (!slot.defined()) {
    slot = g;
    return;
  }
  if (slot.dtype() == DType::BF16 || g.dtype() == DType::BF16) {
    Tensor sum = slot.dtype() == DType::F32 ? slot.clone() : slot.to(DType::F32);
    add_(sum, g.to(DType::F32));
    slot = slot.dtype() == DType::BF16 ? sum.to(DType::BF16) : sum;
    return;
  }
  Tensor sum = slot.clone();
  add_(sum, g);
  slot = sum;
}

struct ReadyNode {
  Node* node;
  NodeTask* task;
};
struct NewestFirst {
  bool operator()(const ReadyNode& a, const ReadyNode& b) const {
    return a.node->sequence_nr < b.node->sequence_nr;
  }
};
}  // namespace

void queue_end_of_outermost_backward_callback(std::function<void()> fn) {
  DDP_CHECK(t_state != nullptr, "queue_end_of_outermost_backward_callback called outside of a backward pass");
  GraphTask* s = t_state;
  while (s->outer) s = s->outer;
  s->callbacks.push_back(std::move(fn));
}

bool in_backward() { return t_state != nullptr; }
bool saved_tensors_die_after_apply() { return t_state != nullptr && !t_state->retain_graph; }

NodeTask* current_node_task(const Node* node) {
  if (!t_state) return nullptr;
  auto it = t_state->nodes.find(node);
  return it == t_state->nodes.end() ? nullptr : &it->second;
}

bool destination_outstanding(const Node* node) {
  for (GraphTask* task = t_state; task; task = task->outer) {
    auto it = task->nodes.find(node);
    if (it != task->nodes.end() && it->second.handed_out.defined()) return true;
  }
  return false;
}

void queue_end_of_backward_callback(std::function<void()> fn) {
  DDP_CHECK(t_state != nullptr, "queue_end_of_backward_callback called outside of a backward pass");
  t_state->callbacks.push_back(std::move(fn));
}

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              BackwardOptions options) {
  DDP_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "backward: ", outputs.size(),
            " outputs but ", grad_outputs.size(), " gradients");
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

  GraphTask task;
  task.outer = t_state;
  task.retain_graph = options.retain_graph;
  t_state = &task;
  struct Restore {
    GraphTask* outer;
    ~Restore() { t_state = outer; }
  } restore{task.outer};

  // 1) find the graph and count, for each node, the edges that will bring it a gradient.
  std::vector<Node*> stack;
  auto discover = [&](Node* n) -> NodeTask& {
    auto [it, inserted] = task.nodes.try_emplace(n);
    if (inserted) {
      it->second.input_buffer.resize(n->num_outputs);
      stack.push_back(n);
    }
    return it->second;
  };
  for (auto& r : roots) discover(r.node.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& e : n->next_edges)
      if (e.node) discover(e.node.get()).pending++;
  }
  // 2) seed the roots and queue those that wait on nothing else.
  for (size_t i = 0; i < roots.size(); ++i)
    accumulate(task.nodes[roots[i].node.get()].input_buffer[roots[i].input_nr], seeds[i]);
  std::priority_queue<ReadyNode, std::vector<ReadyNode>, NewestFirst> ready;
  for (auto& r : roots) {
    NodeTask& t = task.nodes[r.node.get()];
    if (t.pending == 0) {
      t.pending = -1;  // queued
      ready.push({r.node.get(), &t});
    }
  }

  // Keep the root nodes alive for the whole pass (outputs may be temporaries).
  std::vector<std::shared_ptr<Node>> keep;
  for (auto& r : roots) keep.push_back(r.node);

  // 3) run nodes as they become ready (gradient computations themselves are not recorded).
  NoGradGuard no_grad;
  while (!ready.empty()) {
    auto [n, nt] = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(nt->input_buffer);
    nt->input_buffer.clear();
    std::vector<Tensor> input_grads = n->apply(grads);
    grads.clear();
    if (!options.retain_graph) n->release_saved();
    DDP_CHECK(input_grads.size() == n->next_edges.size() || input_grads.empty(), n->name(), " returned ",
              input_grads.size(), " gradients for ", n->next_edges.size(), " inputs");
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      Edge& e = n->next_edges[i];
      if (!e.node) continue;
      NodeTask& next = task.nodes.find(e.node.get())->second;
      if (!input_grads.empty() && input_grads[i].defined())
        accumulate(next.input_buffer[e.input_nr], input_grads[i]);
      if (--next.pending == 0) {
        next.pending = -1;
        ready.push({e.node.get(), &next});
      }
    }
  }

  // 4) end-of-backward callbacks (may queue more callbacks).
  for (size_t i = 0; i < task.callbacks.size(); ++i) {
    auto cb = std::move(task.callbacks[i]);
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

// engine.h - runs backward over the graph recorded by forward: nodes in dependency order (a node runs once
// every gradient flowing into it has been summed), newest-first among the ready ones, on the calling thread;
// saved tensors freed as it goes; end-of-backward callbacks run after the last node. Each backward call keeps
// its bookkeeping (dependency counts, gradients summed so far) in a graph task of its own, never on the
// nodes, so a backward run inside another (a node that recomputes its forward and runs a backward through
// it, as activation checkpointing does) leaves the outer one's state alone even where both graphs meet (a
// parameter's AccumulateGrad used inside and outside the block).
#pragma once
#include <functional>
#include <vector>

#include "runtime/autograd/node.h"

namespace ddp::autograd {

struct BackwardOptions {
  bool retain_graph = false;
};

// Backward from `outputs` seeded with `grad_outputs` (an undefined seed for a one-element output means 1).
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              BackwardOptions options = {});
inline void backward(const Tensor& loss, BackwardOptions options = {}) { backward({loss}, {}, options); }

// Registers fn to run after the last node of the backward running on this thread (only valid inside a
// backward, e.g. from a hook); callbacks run in registration order; an exception from one stops the rest and
// propagates out of backward().
void queue_end_of_backward_callback(std::function<void()> fn);
// Like queue_end_of_backward_callback, but on the outermost backward of this thread when backwards are nested
// (a node that runs its own backward, e.g. activation checkpointing): fn runs after everything.
void queue_end_of_outermost_backward_callback(std::function<void()> fn);
// True while a backward runs on this thread.
bool in_backward();
// True inside a backward that drops each node's saved tensors after the node ran (retain_graph false): a
// node may then write its result into a saved tensor that nothing else holds (cross_entropy writes the
// logits' gradient over the logits).
bool saved_tensors_die_after_apply();

// The leaves (TensorImpl of tensors with requires_grad and no grad_fn) reachable from outputs through the
// graph: the DDP reducer's unused-parameter query. Linear in graph size; marks nodes with a visit epoch,
// allocating nothing per node. Calls visit(leaf) once per reachable leaf.
void for_each_reachable_leaf(const std::vector<Tensor>& outputs,
                             const std::function<void(TensorImpl*)>& visit);

// ---- the innermost backward's view of one node (for node.cpp's gradient destinations) ----
// A node's state in one backward call: edges that have yet to bring it a gradient (-1 once queued), the
// gradients summed so far (one per node output), and the gradient destination handed to an op for it
// (AccumulateGrad's apply consumes it).
struct NodeTask {
  int32_t pending = 0;
  std::vector<Tensor> input_buffer;
  Tensor handed_out;
};
// The state of `node` in the innermost backward running on this thread; null outside a backward or when
// that backward does not reach the node.
NodeTask* current_node_task(const Node* node);
// True when a backward running on this thread (the innermost or one it runs inside) handed out a gradient
// destination for `node` that its AccumulateGrad has not consumed yet: an op may be writing that memory, so
// no other backward of the nest may be handed it.
bool destination_outstanding(const Node* node);

}  // namespace ddp::autograd

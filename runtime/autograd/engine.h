// engine.h - runs backward over the graph recorded by forward: nodes in dependency order (a node runs once
// every gradient flowing into it has been summed), newest-first among the ready ones, on the calling thread;
// saved tensors freed as it goes; end-of-backward callbacks run after the last node.
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

// The leaves (TensorImpl of tensors with requires_grad and no grad_fn) reachable from outputs through the
// graph: the DDP reducer's unused-parameter query. Linear in graph size; marks nodes with a visit epoch,
// allocating nothing per node. Calls visit(leaf) once per reachable leaf.
void for_each_reachable_leaf(const std::vector<Tensor>& outputs,
                             const std::function<void(TensorImpl*)>& visit);

}  // namespace ddp::autograd

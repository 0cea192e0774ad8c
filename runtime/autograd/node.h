// node.h - a node of the define-by-run graph: the backward of one op. It holds edges to the nodes that
// produced its inputs (or to the AccumulateGrad of leaf parameters) and the tensors its backward needs.
//
// Writing an op (see runtime/ops/): compute the output, then, if autograd::needs_grad(inputs...), make a
// Node subclass with the saved tensors, call autograd::record(node, {inputs...}, {outputs...}).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace ddp::autograd {

class Node;

// Where a gradient flows: input `input_nr` of `node`. A null node means "no gradient needed".
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

class Node {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Given the gradients of this node's outputs (one per output; an undefined Tensor means zero), returns the
  // gradients of its inputs, one per next_edges entry (undefined where not needed).
  virtual std::vector<Tensor> apply(std::vector<Tensor>& grad_outputs) = 0;
  virtual const char* name() const = 0;
  // Drops saved tensors once backward ran (retain_graph=false).
  virtual void release_saved() {}

  std::vector<Edge> next_edges;  // one per differentiable input of the op
  uint32_t num_outputs = 1;
  uint64_t sequence_nr;  // creation order: later nodes run first among ready ones

  // Traversal mark of for_each_reachable_leaf (engine.h), valid during one traversal only. A backward's own
  // bookkeeping lives in its graph task (engine.cpp), never here: nested backwards share nodes.
  uint64_t visit_mark = 0;
};

// The leaf node of a parameter: adds the incoming gradient to param.grad, then runs the parameter's
// post-accumulate hooks (the DDP reducer's "gradient ready"). The engine runs it once per backward, after
// every use of the parameter has contributed, so a parameter used twice fires its hooks once with the sum.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> variable);
  std::vector<Tensor> apply(std::vector<Tensor>& grad_outputs) override;
  const char* name() const override { return "AccumulateGrad"; }
  const std::shared_ptr<TensorImpl>& variable() const { return variable_; }

 private:
  std::shared_ptr<TensorImpl> variable_;
};

// The memory a backward may write the gradient for edge `e` into: the leaf's grad_destination (tensor.h)
// when `e` leads to the AccumulateGrad of a leaf with no .grad, this gradient is the leaf's whole gradient in
// this backward (its AccumulateGrad waits for this edge only and holds nothing yet), and the destination is
// contiguous with this shape, dtype and device. Undefined otherwise: the op allocates as usual. The op
// returns the destination as its gradient; AccumulateGrad then makes it the .grad without a copy. What was
// handed out is remembered per backward call (the engine's graph task), so a nested backward running the
// same AccumulateGrad neither consumes nor replaces the outer backward's destination, and while one
// backward of a nest holds a destination not yet consumed, no other is handed it (both would write it).
Tensor gradient_destination(const Edge& e, const Shape& shape, DType dtype, Device device);
// The destination when there is one, else a fresh uninitialised tensor: for a backward whose kernel
// overwrites the whole parameter gradient (linear, embedding, layer norm, conv2d, batch norm).
Tensor gradient_destination_or_empty(const Edge& e, const Shape& shape, DType dtype, Device device);

// ---- grad mode ----
bool grad_enabled();
// Disables graph recording in its scope (inference, optimizer steps, evaluation).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Enables graph recording in its scope, also inside a backward (a node that recomputes its forward, as
// activation checkpointing does).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// ---- helpers for ops ----
// True when grad mode is on and any input requires grad.
inline bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}
// The edge a gradient for `t` must flow into (its grad_fn, its leaf accumulator, or none).
Edge edge_of(const Tensor& t);
// The leaf's accumulator, created on first use and cached weakly in the TensorImpl.
std::shared_ptr<AccumulateGrad> accumulator_of(const Tensor& leaf);
// Connects node to its inputs and makes it the grad_fn of outputs (output i gets output_nr i).
void record(const std::shared_ptr<Node>& node, std::initializer_list<const Tensor*> inputs,
            std::initializer_list<Tensor*> outputs);
void record(const std::shared_ptr<Node>& node, const std::vector<const Tensor*>& inputs,
            const std::vector<Tensor*>& outputs);

}  // namespace ddp::autograd

// checkpoint_block.h - activation checkpointing in miniature for the nested-backward and static_graph
// tests: forward runs a block without recording; the block's backward node recomputes it with recording on
// and runs a backward of its own through the recomputed graph (a backward inside the outer backward),
// returning the input's gradient. Parameters the block uses get their gradient from that inner backward. Also
// the small model those tests share: a weight used inside a checkpointed block and before and/or after it.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "runtime/autograd/engine.h"
#include "runtime/autograd/node.h"
#include "runtime/nn/module.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/linalg.h"

namespace ddp::testing {

using BlockFn = std::function<Tensor(const Tensor&)>;

struct CheckpointNode final : autograd::Node {
  BlockFn fn;
  Tensor input;  // detached copy of the block's input
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {};
    Tensor xi = input.detach();
    xi.set_requires_grad(true);
    Tensor y;
    {
      autograd::EnableGradGuard enable;
      y = fn(xi);
    }
    autograd::backward({y}, {grads[0]});
    return {xi.grad()};
  }
  const char* name() const override { return "CheckpointBackward"; }
};

// y = fn(x), recomputed during backward; recorded whenever grad mode is on (the block's parameters need
// their gradients even when x needs none).
inline Tensor checkpoint(const BlockFn& fn, const Tensor& x) {
  if (!autograd::grad_enabled()) return fn(x);
  Tensor y;
  {
    autograd::NoGradGuard no_grad;
    y = fn(x);
  }
  {
    auto node = std::make_shared<CheckpointNode>();
    node->fn = fn;
    node->input = x.detach();
    autograd::record(node, {&x}, {&y});
  }
  return y;
}

// Where the shared weight W is used besides inside the checkpointed block: before it (its outer gradient
// arrives after the inner backward ran), after it (the outer gradient arrives first), both; depth 2 nests a
// second checkpointed block that also uses W inside the first.
struct Placement {
  bool before = false;
  bool after = false;
  int depth = 1;
  bool shares_w() const { return before || after || depth > 1; }
  std::string name() const {
    return std::string(before ? "before+" : "") + "inside" + (after ? "+after" : "") + " depth " +
           std::to_string(depth);
  }
};
inline std::vector<Placement> all_placements() {
  std::vector<Placement> out;
  for (int depth : {1, 2})
    for (bool before : {false, true})
      for (bool after : {false, true}) out.push_back({before, after, depth});
  return out;
}

// x (rows, 5) -> (rows, 3): W (5x5) inside the (optionally checkpointed) block and where `placement` says,
// V and b elsewhere. Without checkpointing it is the plain graph, the reference.
struct SharedWeightNet : nn::Module {
  SharedWeightNet(Placement p, bool use_checkpoint, DType dtype) : placement(p), ckpt(use_checkpoint) {
    w = register_parameter("w", Tensor::randn({5, 5}, nn::next_init_seed(), dtype, 0.4));
    v = register_parameter("v", Tensor::randn({3, 5}, nn::next_init_seed(), dtype, 0.4));
    b = register_parameter("b", Tensor::randn({5}, nn::next_init_seed(), dtype, 0.1));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    if (placement.before) h = ops::tanh(ops::linear(h, w));
    BlockFn innermost = [this](const Tensor& in) { return ops::tanh(ops::linear(in, w, b)); };
    BlockFn block = innermost;
    if (placement.depth > 1)
      block = [this, innermost](const Tensor& in) {
        Tensor a = ckpt ? checkpoint(innermost, in) : innermost(in);
        return ops::tanh(ops::linear(a, w));
      };
    h = ckpt ? checkpoint(block, h) : block(h);
    if (placement.after) h = ops::tanh(ops::linear(h, w));
    return ops::linear(h, v);
  }
  Placement placement;
  bool ckpt;
  Tensor w, v, b;
};

}  // namespace ddp::testing

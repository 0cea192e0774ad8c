// sharded_optimizer.h - the optimizer of ZeRO-2/3: an ordinary optimizer (SGD, AdamW) over this rank's shard
// of the parameters. Each shard is cut into segments, one per piece of a parameter (shard_layout.h); the
// inner optimizer sees every segment as a parameter of its own (a view of the shard, named
// "fc1.weight[128:256]", ShardedDataParallel::segments()), whose .grad is the sharded .grad: the matching
// view of the gradient shard once a synchronized backward gave the parameter a gradient, accumulating over
// backwards until zero_grad - or none (never given one, no rank used it, or zero_grad to none), so it is
// skipped as plain DDP's optimizer skips it. The update rules are elementwise, so stepping the segments is
// stepping the parameters; zero_grad() clears the segments' .grad as a plain optimizer's clears .grad. After
// the step ZeRO-2 all-gathers the shards back into the whole parameters (ShardedDataParallel::after_step);
// ZeRO-3 keeps them sharded.
//
// Under Join, register it (like ZeroRedundancyOptimizer): a joined rank steps its shard with the gradients
// the others averaged and issues the same gathers. set_join_gradient_transform: what the loop does to the
// gradients between backward and step (ShardedDataParallel::clip_grad_norm_).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "runtime/ddp/joinable.h"
#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/ddp/zero_redundancy_optimizer.h"

namespace ddp {

class ShardedOptimizer : public optim::Optimizer, public Joinable {
 public:
  ShardedOptimizer(ShardedDataParallel& sdp, optim::OptimizerFactory make_inner);
  ~ShardedOptimizer() override;
  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;

  void step() override;
  // This rank's shard of the state: "<param>[a:b].<state>" (e.g. "fc1.weight[0:96].exp_avg") plus the
  // inner optimizer's own entries.
  std::map<std::string, Tensor> state() const override { return inner_->state(); }
  void load_state(const std::map<std::string, Tensor>& state, int64_t steps) override;
  // Checkpoints at any world size. Collective: every rank gets the whole state by parameter name, exactly as
  // the inner optimizer over the whole model would return it ("fc1.weight.exp_avg", "fc1.weight.step"), so
  // plain DDP, tools/ddp_torch.py and another world size load it. SGD and AdamW.
  std::map<std::string, Tensor> consolidated_state();
  // Such a whole state (from consolidated_state() at any world size, or from a plain optimizer): this rank
  // keeps the pieces of its segments. Not collective.
  void load_consolidated_state(const std::map<std::string, Tensor>& state, int64_t steps);
  // Bytes of this rank's optimizer state, and what it would be per parameter (K of the ZeRO formula).
  int64_t state_bytes() const;
  int state_bytes_per_param() const;
  const optim::Optimizer& inner() const { return *inner_; }

  void join_shadow_iteration() override { step_shard(/*training=*/false); }
  void join_zero_grad(bool set_to_none) override { zero_grad(set_to_none); }
  void set_joined_to(bool attached) override { under_join_ = attached; }
  std::string joinable_name() const override { return "ShardedOptimizer"; }
  void set_join_gradient_transform(std::function<void()> transform) { join_transform_ = std::move(transform); }

 private:
  void step_shard(bool training);
  // The inner optimizer's per-parameter state: tensors shaped like the parameter, and one scalar (or none).
  void state_kinds(std::vector<std::string>& tensors, std::string& scalar) const;

  ShardedDataParallel& sdp_;
  const std::vector<ShardedDataParallel::Segment>& segments_;  // the inner optimizer's parameters
  std::unique_ptr<optim::Optimizer> inner_;
  bool under_join_ = false;
  std::function<void()> join_transform_;
};

}  // namespace ddp

// train_ft_zero.h - ZeRO-1 under fault tolerance (`train --fault-tolerant --zero 1`, docs/fault-tolerance.md).
// ZeRO-1 keeps each parameter's optimizer state on one rank (its owner); a lost owner would take that state
// with it. So each owner's partition also lives on a buddy - the next rank of the group that owns a partition -
// which steps it too, from the same averaged gradients, before its own ZeRO step: both hold the same state,
// bitwise (the same code on the same inputs), and the owner's broadcast writes into the buddy's parameters the
// values it already has. Memory: two shards of state per rank instead of one (still 2/world of DDP's).
//
// Why the state of the step being healed to always exists: a rank commits step N only when every owner's
// broadcast of N reached it, so every owner - and, as every buddy is an owner that steps its buddy partition
// before its own broadcast, every buddy - had stepped N. When nobody committed N the healed step is N-1:
// each rank that had stepped keeps a copy of its shards (and of all parameters) from before the step, taken
// right before it, and offers those. Only the loss of both holders of a partition in one change loses state:
// a named error.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/train.h"
#include "runtime/ddp/zero_redundancy_optimizer.h"
#include "runtime/distributed/process_group.h"
#include "runtime/nn/module.h"

namespace ddp::models {

// A broadcast of `t` in place on whatever device it lives (host_broadcast takes host tensors only).
void broadcast_tensor(dist::ProcessGroup& pg, Tensor& t, int root);

// A map of state tensors from `root` to every rank of `pg` (names, dtypes and shapes first, then each
// tensor); receivers allocate on `device`. The root's own map is returned unchanged.
std::map<std::string, Tensor> broadcast_state_map(dist::ProcessGroup& pg, const std::map<std::string, Tensor>& mine,
                                                  int root, Device device);

class FtZeroOne {
 public:
  FtZeroOne(const TrainOptions& o, std::shared_ptr<nn::Module> model) : o_(o), model_(std::move(model)) {}

  // A new group: ZeRO-1 over it, the buddy partition's optimizer, both loaded from `full` (every parameter's
  // state, as the plain optimizer names it; empty before the first step) at step count `steps`.
  void rebuild(std::shared_ptr<dist::ProcessGroup> pg, const std::map<std::string, Tensor>& full, int64_t steps);
  // One optimizer step (the gradients are averaged and clipped): copies for a rollback, the buddy's step, the
  // ZeRO step with its broadcasts (collective). Throws when a broadcast fails; then attempted() stays true.
  void step(double lr);
  void zero_grad() { if (zero_) zero_->zero_grad(); }
  // The step is committed: the copies are dropped.
  void committed() { attempted_ = false; }

  // Recovery, healing to step `target` from this rank at committed step `committed`: the state this rank
  // holds at `target` (its own and its buddy's shards; from its copies when it stepped and `target` is its
  // committed step, which also puts the copied parameters back), or nothing when it has none at `target`.
  // Asking again (a recovery that failed half-way) gives the same answer; rebuild() drops the copies.
  std::map<std::string, Tensor> state_at(int64_t target, int64_t committed);

  int64_t steps() const { return zero_ ? zero_->steps() : 0; }
  optim::Optimizer* optimizer() { return zero_.get(); }

 private:
  const TrainOptions& o_;
  std::shared_ptr<nn::Module> model_;
  std::shared_ptr<dist::ProcessGroup> pg_;
  std::unique_ptr<optim::ZeroRedundancyOptimizer> zero_;
  std::unique_ptr<optim::Optimizer> buddy_;  // the partition this rank is the buddy of (null: none)
  bool attempted_ = false;                   // stepped since the last commit
  std::vector<Tensor> params_before_;
  std::map<std::string, Tensor> state_before_;
};

}  // namespace ddp::models

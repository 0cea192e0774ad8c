// zero_redundancy_optimizer.h - ZeroRedundancyOptimizer (ZeRO stage 1, like
// torch.distributed.optim.ZeroRedundancyOptimizer): the optimizer state is sharded across the ranks of a
// process group. Each rank owns a partition of the parameters (balanced by size), keeps the inner
// optimizer's state (AdamW moments, SGD momentum) only for those, steps only those, and then every rank's
// updated parameters reach every other rank (one broadcast per rank of a flat buffer of its partition).
// Gradients must already be averaged (DDP did that), so every rank's step sees the same gradients.
//
// Checkpoints: consolidate_state_dict(to) (a collective) gathers every rank's shard on rank `to`, whose
// state() then returns a normal optimizer state by parameter name. load_state() takes such a full state on
// any rank and keeps the entries of the parameters this rank owns - so a run can resume on another world
// size (the partition is recomputed from the sizes). See docs/extensions.md.
//
// Uneven inputs: register it with the DDP wrapper's Join (ddp::Join join(ddp, {.joinables = {&zero}}); a Join
// over the same group without it is refused). Under Join every step first agrees on the learning rate (one
// all-reduce: a joined rank's own is stale), and a joined rank runs one step per iteration of the others: its
// shard stepped with the gradients their backward averaged, then the same broadcasts (PyTorch's
// _ZeROJoinHook), so the result equals the unsharded optimizer's. That is why it lives in runtime/ddp (beside
// Join), above the plain optimizers of runtime/optim it wraps (the layers: tools/check_layers.py).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/ddp/joinable.h"
#include "runtime/distributed/process_group.h"
#include "runtime/optim/optimizer.h"

namespace ddp::optim {

// Rank owning each parameter: parameters sorted by element count, largest first (ties: lower index first),
// each given to the rank with the smallest running total (ties: lower rank). Deterministic on every rank.
std::vector<int> partition_parameters(const std::vector<int64_t>& numels, int world);

// Builds the inner optimizer over a subset of the parameters.
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(std::vector<nn::NamedTensor>)>;

class ZeroRedundancyOptimizer : public Optimizer, public Joinable {
 public:
  // params: the full list (same order and shapes on every rank); they must share one dtype and device.
  ZeroRedundancyOptimizer(std::vector<nn::NamedTensor> params, std::shared_ptr<dist::ProcessGroup> pg,
                          OptimizerFactory make_inner);
  ~ZeroRedundancyOptimizer() override;
  ZeroRedundancyOptimizer(const ZeroRedundancyOptimizer&) = delete;
  ZeroRedundancyOptimizer& operator=(const ZeroRedundancyOptimizer&) = delete;

  // Steps the owned parameters with the inner optimizer, then broadcasts each rank's partition from it.
  void step() override;
  // The consolidated full state; only on the `to` rank of the last consolidate_state_dict() and only until the
  // next step (otherwise a clear error: the shards are elsewhere).
  std::map<std::string, Tensor> state() const override;
  // A full (consolidated) state, on any rank and any world size: this rank keeps its owned parameters' entries.
  void load_state(const std::map<std::string, Tensor>& state, int64_t steps) override;
  // Collective: every rank sends its shard to rank `to` (by broadcasts, so NCCL works too).
  void consolidate_state_dict(int to = 0);

  // This rank's shard of the state, and its size in bytes (the figure ZeRO shrinks to about 1/world).
  std::map<std::string, Tensor> local_state() const { return inner_->state(); }
  int64_t local_state_bytes() const;
  const std::vector<int>& owners() const { return owner_; }
  const Optimizer& inner() const { return *inner_; }  // its kind is the checkpoint's optimizer kind
  int64_t owned_numel(int rank) const;

  // Joinable (joinable.h): on a joined rank, one step of the ranks still training.
  void join_shadow_iteration() override { step_shard(/*training=*/false); }
  void set_joined_to(bool attached) override { under_join_ = attached; }
  std::string joinable_name() const override { return "ZeroRedundancyOptimizer"; }
  // Under Join: what the training loop does to the averaged gradients between backward and step() (e.g.
  // clip_grad_norm_); a joined rank's shadow step runs it before stepping its shard, as the others did.
  void set_join_gradient_transform(std::function<void()> transform) {
    join_transform_ = std::move(transform);
  }

 private:
  // step() on a rank still training (training) or its shadow on a joined rank.
  void step_shard(bool training);

  std::shared_ptr<dist::ProcessGroup> pg_;
  std::vector<int> owner_;                 // per parameter
  std::vector<std::vector<size_t>> owned_;  // per rank: its parameter indices, in parameter order
  std::unique_ptr<Optimizer> inner_;
  std::optional<std::map<std::string, Tensor>> consolidated_;
  bool under_join_ = false;  // registered with an attached ddp::Join
  std::function<void()> join_transform_;
};

}  // namespace ddp::optim

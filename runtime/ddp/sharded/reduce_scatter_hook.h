// reduce_scatter_hook.h - the comm hook of ZeRO-2/3: a bucket (this rank's gradients / world, padded) is
// reduce-scattered into this rank's shard of the averaged gradient instead of all-reduced in place. The
// reducer sees result_is_sharded() and keeps its buckets for one backward only (reducer.h).
#pragma once
#include <vector>

#include "runtime/ddp/comm_hook.h"

namespace ddp {

class ShardedDataParallel;

class ReduceScatterHook final : public CommHook {
 public:
  const char* name() const override { return "reduce-scatter"; }
  bool result_is_sharded() const override { return true; }
  std::shared_ptr<dist::Work> run(dist::ProcessGroup& pg, GradBucket& bucket) override;
  // The shard each bucket reduces into (one per bucket, shard_numel elements), and who to tell at launch.
  void set_shards(std::vector<Tensor> shard_grads, ShardedDataParallel* owner) {
    shards_ = std::move(shard_grads);
    owner_ = owner;
  }

 private:
  std::vector<Tensor> shards_;
  ShardedDataParallel* owner_ = nullptr;
};

}  // namespace ddp

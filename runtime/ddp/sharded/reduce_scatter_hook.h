// reduce_scatter_hook.h - the comm hook of ZeRO-2/3: a bucket (this rank's gradients / world, padded) is
// reduce-scattered into this rank's shard of the averaged gradient instead of all-reduced in place. The
// reducer sees result_is_sharded() and keeps its buckets for one backward only (reducer.h); the wrapper
// accumulates the results into its gradient shards as .grad accumulates.
#pragma once
#include <vector>

#include "runtime/ddp/comm_hook.h"

namespace ddp {

class ShardedDataParallel;

class ReduceScatterHook final : public CommHook {
 public:
  const char* name() const override { return "reduce-scatter"; }
  bool result_is_sharded() const override { return true; }
  // Each bucket goes to ShardedDataParallel::gradient_destination(b) (its gradient shard, or a buffer to add
  // into it); the wrapper adds it there once every bucket is done (sharded_results_ready).
  std::shared_ptr<dist::Work> run(dist::ProcessGroup& pg, GradBucket& bucket) override;
  void sharded_results_ready(const std::vector<uint8_t>& parameters_used) override;
  void set_owner(ShardedDataParallel* owner) { owner_ = owner; }

 private:
  ShardedDataParallel* owner_ = nullptr;
};

}  // namespace ddp

// reduce_scatter_hook.cpp - one reduce-scatter per bucket into this rank's gradient shard.
#include "runtime/ddp/sharded/reduce_scatter_hook.h"

#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/distributed/comm_buffer_of.h"

namespace ddp {

std::shared_ptr<dist::Work> ReduceScatterHook::run(dist::ProcessGroup& pg, GradBucket& bucket) {
  DDP_CHECK(owner_ != nullptr, "ZeRO: the reduce-scatter hook has no ShardedDataParallel");
  Tensor& out = owner_->gradient_destination(bucket.index);
  DDP_CHECK(bucket.buffer.numel() == out.numel() * pg.size(), "ZeRO: bucket ", bucket.index, " has ",
            bucket.buffer.numel(), " elements, not ", pg.size(), " x its shard of ", out.numel());
  bytes_ += static_cast<int64_t>(bucket.buffer.nbytes());
  auto work = pg.reduce_scatter(comm_buffer_of(bucket.buffer), comm_buffer_of(out),
                                bucket.average ? dist::ReduceOp::Avg : dist::ReduceOp::Sum);
  owner_->on_bucket_reduce_scatter(bucket.index);
  return work;
}

void ReduceScatterHook::sharded_results_ready(const std::vector<uint8_t>& parameters_used) {
  if (owner_) owner_->accumulate_gradient_shards(parameters_used);
}

}  // namespace ddp

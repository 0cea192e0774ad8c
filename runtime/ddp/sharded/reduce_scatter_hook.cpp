// reduce_scatter_hook.cpp - one reduce-scatter per bucket into this rank's gradient shard.
#include "runtime/ddp/sharded/reduce_scatter_hook.h"

#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/distributed/comm_buffer_of.h"

namespace ddp {

std::shared_ptr<dist::Work> ReduceScatterHook::run(dist::ProcessGroup& pg, GradBucket& bucket) {
  DDP_CHECK(bucket.index < shards_.size(), "ZeRO: bucket ", bucket.index, " has no gradient shard (",
            shards_.size(), " shards)");
  Tensor& out = shards_[bucket.index];
  DDP_CHECK(bucket.buffer.numel() == out.numel() * pg.size(), "ZeRO: bucket ", bucket.index, " has ",
            bucket.buffer.numel(), " elements, not ", pg.size(), " x its shard of ", out.numel());
  bytes_ += static_cast<int64_t>(bucket.buffer.nbytes());
  auto work = pg.reduce_scatter(comm_buffer_of(bucket.buffer), comm_buffer_of(out),
                                bucket.average ? dist::ReduceOp::Avg : dist::ReduceOp::Sum);
  if (owner_) owner_->on_bucket_reduce_scatter(bucket.index);
  return work;
}

}  // namespace ddp

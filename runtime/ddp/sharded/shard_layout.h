// shard_layout.h - how ZeRO-2 and ZeRO-3 cut the reducer's buckets into one equal shard per rank. A bucket is
// its parameters back to back (the reducer's slots), padded with zeros to a multiple of world x 16 elements;
// rank r owns elements [r*S, (r+1)*S) of it, S = padded / world. A parameter may straddle shards: a rank's
// shard is a list of segments, each a contiguous range of one parameter. Pure arithmetic, no tensors.
//
// Why world x 16: every shard then has the same length (reduce-scatter and all-gather need that) and starts
// on a 64-byte boundary for float32 (a cache line: the shm backend's copy loops and the ranks writing
// neighbouring shards never share a line). Megatron pads to lcm(world, 128) for NCCL's ring bandwidth; on a
// GPU that is the better choice and costs at most 127 x world elements per bucket.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ddp {

// Elements a sharded bucket is padded to a multiple of.
int64_t shard_pad_multiple(int world);

// One contiguous piece of a parameter inside a rank's shard.
struct ShardSegment {
  size_t param = 0;          // parameter index (the reducer's)
  int64_t param_begin = 0;   // element range of the parameter (flattened)
  int64_t param_end = 0;
  int64_t shard_offset = 0;  // where the piece starts in the shard
  int64_t numel() const { return param_end - param_begin; }
};

struct BucketShard {
  int64_t bucket_numel = 0;  // padded
  int64_t shard_numel = 0;   // bucket_numel / world
  int64_t shard_begin = 0;   // rank * shard_numel: the shard's offset in the bucket
  std::vector<ShardSegment> segments;  // this rank's pieces, in shard order (padding has none)
};

// params: the bucket's parameter indices in slot order; offsets: each one's slot offset in the bucket;
// numels: each one's element count (same order). bucket_numel must be a multiple of world.
BucketShard shard_of_bucket(const std::vector<size_t>& params, const std::vector<int64_t>& offsets,
                            const std::vector<int64_t>& numels, int64_t bucket_numel, int world, int rank);

}  // namespace ddp

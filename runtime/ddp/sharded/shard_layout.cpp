// shard_layout.cpp - the equal shards of a padded bucket and the parameter segments in each (shard_layout.h).
#include "runtime/ddp/sharded/shard_layout.h"

#include <algorithm>

#include "runtime/core/error.h"

namespace ddp {

int64_t shard_pad_multiple(int world) { return static_cast<int64_t>(world) * 16; }

BucketShard shard_of_bucket(const std::vector<size_t>& params, const std::vector<int64_t>& offsets,
                            const std::vector<int64_t>& numels, int64_t bucket_numel, int world, int rank) {
  DDP_CHECK(world >= 1 && rank >= 0 && rank < world, "shard_of_bucket: rank ", rank, " of world ", world);
  DDP_CHECK(bucket_numel % world == 0, "shard_of_bucket: bucket of ", bucket_numel,
            " elements does not split into ", world, " equal shards (pad it)");
  DDP_CHECK(params.size() == offsets.size() && params.size() == numels.size(),
            "shard_of_bucket: params, offsets and numels differ in length");
  BucketShard s;
  s.bucket_numel = bucket_numel;
  s.shard_numel = bucket_numel / world;
  s.shard_begin = s.shard_numel * rank;
  const int64_t lo = s.shard_begin, hi = lo + s.shard_numel;
  for (size_t k = 0; k < params.size(); ++k) {
    const int64_t a = std::max(lo, offsets[k]), b = std::min(hi, offsets[k] + numels[k]);
    if (a >= b) continue;
    DDP_CHECK(offsets[k] + numels[k] <= bucket_numel, "shard_of_bucket: parameter ", params[k],
              " ends past the bucket");
    s.segments.push_back({params[k], a - offsets[k], b - offsets[k], a - lo});
  }
  return s;
}

}  // namespace ddp

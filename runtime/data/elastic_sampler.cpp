// elastic_sampler.cpp - the epoch as one stream cut into steps over a changing world (see elastic_sampler.h).
#include "runtime/data/elastic_sampler.h"

#include <algorithm>

#include "runtime/core/error.h"
#include "runtime/data/distributed_sampler.h"

namespace ddp::data {

double ElasticShare::loss_weight(int world) const {
  if (rows() == 0 || step_rows() == 0) return 0.0;
  return static_cast<double>(rows()) * static_cast<double>(world) / static_cast<double>(step_rows());
}

ElasticShare elastic_share(int64_t epoch_size, int64_t position, int world, int rank, int64_t batch) {
  DDP_CHECK(world >= 1 && rank >= 0 && rank < world, "elastic_share: rank ", rank, " of world ", world);
  DDP_CHECK(batch >= 1, "elastic_share: batch ", batch, " must be >= 1");
  DDP_CHECK(position >= 0 && position < epoch_size, "elastic_share: position ", position,
            " outside the epoch of ", epoch_size, " samples");
  ElasticShare s;
  s.step_begin = position;
  s.step_end = std::min(epoch_size, position + static_cast<int64_t>(world) * batch);
  const int64_t per = (s.step_rows() + world - 1) / world;  // == batch except at the epoch's end
  s.begin = std::min(s.step_end, s.step_begin + per * rank);
  s.end = std::min(s.step_end, s.begin + per);
  return s;
}

std::vector<int64_t> elastic_indices(int64_t epoch_size, uint64_t seed, int64_t epoch, int64_t begin, int64_t end) {
  DDP_CHECK(0 <= begin && begin <= end && end <= epoch_size, "elastic_indices: [", begin, ", ", end,
            ") outside the epoch of ", epoch_size);
  const std::vector<int64_t> order = DistributedSampler::permutation(epoch_size, seed + static_cast<uint64_t>(epoch));
  return {order.begin() + begin, order.begin() + end};
}

}  // namespace ddp::data

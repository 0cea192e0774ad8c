// elastic_sampler.h - the data rule of fault-tolerant training (docs/fault-tolerance.md): every sample of an
// epoch is used exactly once however the world changes during it. The epoch's order is one permutation of the
// whole data set (DistributedSampler::permutation, seeded by seed + epoch: it does not depend on the world
// size) read as a single stream; a position counts the samples the committed steps have consumed. A step at
// position p over a world of w members takes the next w x batch samples (fewer at the epoch's end), member r
// the r-th contiguous share. Only a committed step moves the position, so a step that failed (a rank was
// lost) is redone from the same position over the new world: the lost rank's share included.
//
// At the epoch's end the last step takes what is left, split in shares of ceil(left / w) (the last members
// may get fewer, or none). Each member weights its mean loss by its share of the step's samples
// (loss_weight), so the all-reduced mean gradient is the mean over the step's samples whatever the split - the
// same as one process computing that whole batch.
#pragma once
#include <cstdint>
#include <vector>

namespace ddp::data {

struct ElasticShare {
  int64_t step_begin = 0, step_end = 0;  // positions of the whole step's samples in the epoch's order
  int64_t begin = 0, end = 0;            // this member's part of them
  int64_t rows() const { return end - begin; }
  int64_t step_rows() const { return step_end - step_begin; }
  // The factor on this member's mean loss: rows * world / step_rows (0 for an empty share).
  double loss_weight(int world) const;
};

// Member `rank` of `world` at `position` of an epoch of `epoch_size` samples, `batch` samples per member.
ElasticShare elastic_share(int64_t epoch_size, int64_t position, int world, int rank, int64_t batch);

// The dataset indices at positions [begin, end) of epoch `epoch`'s order.
std::vector<int64_t> elastic_indices(int64_t epoch_size, uint64_t seed, int64_t epoch, int64_t begin, int64_t end);

}  // namespace ddp::data

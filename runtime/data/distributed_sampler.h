// distributed_sampler.h - which dataset indices each rank visits in an epoch, with PyTorch's
// DistributedSampler semantics (torch/utils/data/distributed.py):
// - num_samples per rank = ceil(N / R), or floor(N / R) with drop_last when R does not divide N;
//   total_size = num_samples * R.
// - The epoch's order is 0..N-1, or with shuffle a permutation seeded by seed + epoch.
// - Without drop_last the list is padded to total_size by wrapping around its head (repeated as often as
//   needed); with drop_last it is cut to total_size.
// - Rank r takes positions r, r + R, r + 2R, ... of that list (interleaved, not contiguous blocks).
//
// Differences from PyTorch, on purpose:
// - The permutation comes from our own documented generator (permutation() below: std::mt19937_64 and a
//   Fisher-Yates shuffle with unbiased rejection sampling), so it is identical on every platform and
//   compiler, but it is NOT torch.randperm's order: the same seed gives a different order than PyTorch.
// - The primary entry point is indices_for_epoch(epoch): the epoch is an argument, so "forgot to call
//   set_epoch, every epoch repeats the same order" cannot happen. The PyTorch-style set_epoch() + indices()
//   pair exists too, and indices() refuses to hand out a shuffled order twice without a set_epoch() between.
// - Each position says whether it is padding (a duplicate that only evens out the ranks), so distributed
//   evaluation can count every sample exactly once.
#pragma once
#include <cstdint>
#include <vector>

namespace ddp::data {

// One rank's share of one epoch.
struct SamplerEpoch {
  int64_t epoch = 0;
  std::vector<int64_t> indices;     // dataset indices in visiting order
  std::vector<uint8_t> is_padding;  // 1 where indices[i] is a padding duplicate (skip it in evaluation)
  // How many positions are real samples (not padding).
  int64_t num_real() const;
};

class DistributedSampler {
 public:
  struct Options {
    int64_t num_replicas = 1;  // world size
    int64_t rank = 0;          // this process's rank, 0 <= rank < num_replicas
    bool shuffle = true;
    uint64_t seed = 0;  // must be the same on every rank
    bool drop_last = false;
  };

  // DistributedSampler s(60000, {.num_replicas = world, .rank = rank, .seed = 42});
  DistributedSampler(int64_t dataset_size, Options options);
  // PyTorch's argument order.
  DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  // Primary entry point: this rank's indices (and padding flags) for the given epoch (>= 0).
  SamplerEpoch indices_for_epoch(int64_t epoch) const;

  // PyTorch-style: set_epoch(e) then indices(). With shuffle on, a second indices() for the same epoch
  // without set_epoch() in between throws (it is almost always the forgotten-set_epoch bug).
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  std::vector<int64_t> indices() const;
  // Padding flags for the current epoch, position by position like indices() (does not count as a call).
  std::vector<uint8_t> padding_mask() const;

  int64_t dataset_size() const { return dataset_size_; }
  int64_t num_replicas() const { return opt_.num_replicas; }
  int64_t rank() const { return opt_.rank; }
  int64_t num_samples() const { return num_samples_; }  // per rank, padding included
  int64_t total_size() const { return num_samples_ * opt_.num_replicas; }
  const Options& options() const { return opt_; }

  // The generator: a permutation of 0..n-1 from std::mt19937_64(seed), Fisher-Yates from the back
  // (for i = n-1 .. 1: j = uniform in [0, i], swap p[i], p[j]); uniform draws use rejection sampling on
  // the raw 64-bit outputs (reject x < 2^64 mod (i+1), then j = x mod (i+1)), so no std::distribution
  // whose algorithm differs between standard libraries is involved.
  static std::vector<int64_t> permutation(int64_t n, uint64_t seed);

 private:
  Options opt_;
  int64_t dataset_size_ = 0;
  int64_t num_samples_ = 0;
  int64_t epoch_ = 0;
  mutable int64_t indices_calls_this_epoch_ = 0;
};

}  // namespace ddp::data

// distributed_sampler.cpp - the epoch order (identity or our documented permutation), padding or cutting
// to total_size, and the interleaved split across ranks.
#include "runtime/data/distributed_sampler.h"

#include <random>
#include <utility>

#include "runtime/core/error.h"

namespace ddp::data {

int64_t SamplerEpoch::num_real() const {
  int64_t n = 0;
  for (uint8_t p : is_padding) n += p ? 0 : 1;
  return n;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, Options options)
    : opt_(options), dataset_size_(dataset_size) {
  DDP_CHECK(dataset_size >= 0, "DistributedSampler: dataset_size must be >= 0, got ", dataset_size);
  DDP_CHECK(opt_.num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1 (the world size), got ",
            opt_.num_replicas);
  DDP_CHECK(opt_.rank >= 0 && opt_.rank < opt_.num_replicas, "DistributedSampler: rank ", opt_.rank,
            " is outside [0, ", opt_.num_replicas - 1, "]; pass the process's global rank");
  const int64_t n = dataset_size, r = opt_.num_replicas;
  if (opt_.drop_last && n % r != 0)
    num_samples_ = n / r;  // drop the tail so every rank gets the same count
  else
    num_samples_ = (n + r - 1) / r;  // pad up to a multiple of r
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : DistributedSampler(dataset_size, Options{num_replicas, rank, shuffle, seed, drop_last}) {}

std::vector<int64_t> DistributedSampler::permutation(int64_t n, uint64_t seed) {
  DDP_CHECK(n >= 0, "DistributedSampler::permutation: n must be >= 0, got ", n);
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  std::mt19937_64 gen(seed);
  for (int64_t i = n - 1; i >= 1; --i) {
    const uint64_t range = static_cast<uint64_t>(i) + 1;
    const uint64_t reject_below = (0 - range) % range;  // 2^64 mod range: the biased low values
    uint64_t x = gen();
    while (x < reject_below) x = gen();
    const auto j = static_cast<size_t>(x % range);
    std::swap(p[static_cast<size_t>(i)], p[j]);
  }
  return p;
}

SamplerEpoch DistributedSampler::indices_for_epoch(int64_t epoch) const {
  DDP_CHECK(epoch >= 0, "DistributedSampler: epoch must be >= 0, got ", epoch);
  SamplerEpoch out;
  out.epoch = epoch;
  const int64_t n = dataset_size_, r = opt_.num_replicas, total = total_size();
  if (num_samples_ == 0) return out;
  std::vector<int64_t> order;
  if (opt_.shuffle) {
    order = permutation(n, opt_.seed + static_cast<uint64_t>(epoch));
  } else {
    order.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  }
  // Position k of the padded (or cut) list is order[k mod n]: positions >= n wrap around the head.
  out.indices.reserve(static_cast<size_t>(num_samples_));
  out.is_padding.reserve(static_cast<size_t>(num_samples_));
  for (int64_t k = opt_.rank; k < total; k += r) {
    out.indices.push_back(order[static_cast<size_t>(k % n)]);
    out.is_padding.push_back(k >= n ? 1 : 0);
  }
  return out;
}

void DistributedSampler::set_epoch(int64_t epoch) {
  DDP_CHECK(epoch >= 0, "DistributedSampler::set_epoch: epoch must be >= 0, got ", epoch);
  epoch_ = epoch;
  indices_calls_this_epoch_ = 0;
}

std::vector<int64_t> DistributedSampler::indices() const {
  DDP_CHECK(!opt_.shuffle || indices_calls_this_epoch_ == 0,
            "DistributedSampler::indices() called again for epoch ", epoch_,
            " without set_epoch(): every epoch would visit the same shuffled order. Call set_epoch(e) "
            "before each epoch, or use indices_for_epoch(e)");
  ++indices_calls_this_epoch_;
  return indices_for_epoch(epoch_).indices;
}

std::vector<uint8_t> DistributedSampler::padding_mask() const { return indices_for_epoch(epoch_).is_padding; }

}  // namespace ddp::data

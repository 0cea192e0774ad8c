// test_distributed_sampler.cpp - DistributedSampler's partition (coverage, sizes, padding, drop_last),
// interleaving, determinism and epoch dependence, against properties computed independently here.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "runtime/core/error.h"
#include "runtime/data/distributed_sampler.h"

namespace ddp::data {
namespace {

std::vector<SamplerEpoch> all_ranks(int64_t n, int64_t world, bool shuffle, bool drop_last, int64_t epoch,
                                    uint64_t seed = 7) {
  std::vector<SamplerEpoch> out;
  for (int64_t r = 0; r < world; ++r)
    out.push_back(
        DistributedSampler(
            n, {.num_replicas = world, .rank = r, .shuffle = shuffle, .seed = seed, .drop_last = drop_last})
            .indices_for_epoch(epoch));
  return out;
}

// Sizes, coverage and padding for many (N, R) pairs, with and without shuffle / drop_last.
TEST(DistributedSampler, PartitionProperties) {
  for (int64_t n : {0, 1, 2, 5, 10, 11, 17, 100}) {
    for (int64_t world : {1, 2, 3, 4, 7, 12}) {
      for (bool shuffle : {false, true}) {
        for (bool drop_last : {false, true}) {
          SCOPED_TRACE("n=" + std::to_string(n) + " world=" + std::to_string(world) +
                       " shuffle=" + std::to_string(shuffle) + " drop_last=" + std::to_string(drop_last));
          DistributedSampler s(n, world, 0, shuffle, 7, drop_last);
          int64_t per_rank = drop_last ? n / world : (n + world - 1) / world;
          EXPECT_EQ(s.num_samples(), per_rank);
          EXPECT_EQ(s.total_size(), per_rank * world);
          std::map<int64_t, int> real_count, any_count;
          int64_t padding = 0;
          for (auto& e : all_ranks(n, world, shuffle, drop_last, 3)) {
            ASSERT_EQ(static_cast<int64_t>(e.indices.size()), per_rank);
            ASSERT_EQ(e.is_padding.size(), e.indices.size());
            for (size_t i = 0; i < e.indices.size(); ++i) {
              ASSERT_GE(e.indices[i], 0);
              ASSERT_LT(e.indices[i], n);
              ++any_count[e.indices[i]];
              if (e.is_padding[i])
                ++padding;
              else
                ++real_count[e.indices[i]];
            }
          }
          if (drop_last) {
            // Distinct samples, (n mod world) of them dropped, no padding.
            EXPECT_EQ(padding, 0);
            EXPECT_EQ(static_cast<int64_t>(any_count.size()), per_rank * world);
            for (auto& [idx, c] : any_count) EXPECT_EQ(c, 1) << idx;
          } else {
            // Every sample exactly once as a real position; padding fills up to total_size.
            EXPECT_EQ(static_cast<int64_t>(real_count.size()), n);
            for (auto& [idx, c] : real_count) EXPECT_EQ(c, 1) << idx;
            EXPECT_EQ(padding, per_rank * world - n);
            EXPECT_LT(padding, world);
          }
        }
      }
    }
  }
}

// Without shuffle, rank r gets r, r+R, r+2R, ... and the padding wraps around the head of the list.
TEST(DistributedSampler, InterleavedSplitAndHeadPadding) {
  // N=10, R=4: padded list 0..9,0,1 -> rank 1: 1,5,9 ; rank 2: 2,6,0 (pad) ; rank 3: 3,7,1 (pad)
  auto e = all_ranks(10, 4, false, false, 0);
  EXPECT_EQ(e[0].indices, (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(e[1].indices, (std::vector<int64_t>{1, 5, 9}));
  EXPECT_EQ(e[2].indices, (std::vector<int64_t>{2, 6, 0}));
  EXPECT_EQ(e[3].indices, (std::vector<int64_t>{3, 7, 1}));
  EXPECT_EQ(e[2].is_padding, (std::vector<uint8_t>{0, 0, 1}));
  EXPECT_EQ(e[1].num_real(), 3);
  EXPECT_EQ(e[3].num_real(), 2);
  // drop_last cuts the tail: 0..7 only.
  auto d = all_ranks(10, 4, false, true, 0);
  EXPECT_EQ(d[1].indices, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(d[3].indices, (std::vector<int64_t>{3, 7}));
  // Padding longer than the list repeats it: N=2, R=5 -> 0,1,0,1,0.
  auto w = all_ranks(2, 5, false, false, 0);
  std::vector<int64_t> got;
  for (auto& r : w) got.push_back(r.indices.at(0));
  EXPECT_EQ(got, (std::vector<int64_t>{0, 1, 0, 1, 0}));
}

// With shuffle, the ranks interleave the same permutation of seed + epoch.
TEST(DistributedSampler, ShuffledRanksInterleaveOnePermutation) {
  const int64_t n = 23, world = 3, epoch = 4;
  const uint64_t seed = 99;
  std::vector<int64_t> perm = DistributedSampler::permutation(n, seed + epoch);
  auto e = all_ranks(n, world, true, false, epoch, seed);
  for (int64_t r = 0; r < world; ++r)
    for (size_t i = 0; i < e[r].indices.size(); ++i)
      EXPECT_EQ(e[r].indices[i], perm[(r + static_cast<int64_t>(i) * world) % n]);
}

TEST(DistributedSampler, PermutationIsDeterministicAndAPermutation) {
  auto a = DistributedSampler::permutation(1000, 5);
  auto b = DistributedSampler::permutation(1000, 5);
  EXPECT_EQ(a, b);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_NE(a, DistributedSampler::permutation(1000, 6));
  // Not the identity (the chance of that is 1/1000!).
  std::vector<int64_t> identity(1000);
  for (int64_t i = 0; i < 1000; ++i) identity[i] = i;
  EXPECT_NE(a, identity);
  // Every position gets many different values over seeds (no stuck element).
  std::set<int64_t> first;
  for (uint64_t s = 0; s < 200; ++s) first.insert(DistributedSampler::permutation(10, s)[0]);
  EXPECT_EQ(first.size(), 10u);
}

TEST(DistributedSampler, EpochsDifferAndRepeatExactly) {
  DistributedSampler s(500, {.num_replicas = 2, .rank = 1, .seed = 3});
  auto e0 = s.indices_for_epoch(0), e1 = s.indices_for_epoch(1);
  EXPECT_NE(e0.indices, e1.indices);
  EXPECT_EQ(s.indices_for_epoch(1).indices, e1.indices);
  DistributedSampler same_seed(500, 2, 1, true, 3);
  EXPECT_EQ(same_seed.indices_for_epoch(0).indices, e0.indices);
  DistributedSampler other_seed(500, 2, 1, true, 4);
  EXPECT_NE(other_seed.indices_for_epoch(0).indices, e0.indices);
  DistributedSampler no_shuffle(500, 2, 1, false);
  EXPECT_EQ(no_shuffle.indices_for_epoch(0).indices, no_shuffle.indices_for_epoch(7).indices);
}

TEST(DistributedSampler, SetEpochStyleGuardsAgainstForgetting) {
  DistributedSampler s(50, 2, 0, true, 1);
  auto first = s.indices();
  EXPECT_THROW(s.indices(), Error) << "a second shuffled epoch without set_epoch is refused";
  s.set_epoch(1);
  auto second = s.indices();
  EXPECT_NE(first, second);
  EXPECT_EQ(second, s.indices_for_epoch(1).indices);
  EXPECT_EQ(s.padding_mask(), s.indices_for_epoch(1).is_padding);
  DistributedSampler plain(50, 2, 0, false);
  EXPECT_EQ(plain.indices(), plain.indices()) << "without shuffle the order never changes";
}

TEST(DistributedSampler, BadArgumentsAreErrors) {
  EXPECT_THROW(DistributedSampler(-1, 2, 0), Error);
  EXPECT_THROW(DistributedSampler(10, 0, 0), Error);
  EXPECT_THROW(DistributedSampler(10, 2, 2), Error);
  EXPECT_THROW(DistributedSampler(10, 2, -1), Error);
  DistributedSampler s(10, 2, 0);
  EXPECT_THROW(s.indices_for_epoch(-1), Error);
  EXPECT_THROW(s.set_epoch(-2), Error);
}

}  // namespace
}  // namespace ddp::data

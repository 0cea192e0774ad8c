// test_multi_tensor_plan.cpp - the plan that turns a list of tensor sizes into multi-tensor launches
// (kernels/cpu/multi_tensor.h, used by every kernel of kernels/cuda/multi_tensor.cu): every (tensor, chunk)
// pair once, in list order, no launch over its table's room, empty tensors skipped; sizes 0, 1, chunk - 1,
// chunk, chunk + 1, primes, many tiny tensors, one huge one, more tensors than one launch holds. And the CPU
// twin of the device's chunked sum of squares against a plain float64 sum.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/multi_tensor.h"
#include "runtime/core/error.h"

using namespace ddp::kernels::cpu;

namespace {
// Checks every rule of a plan and returns its blocks as (tensor, chunk) pairs in plan order.
std::vector<std::pair<int64_t, int32_t>> checked_blocks(const std::vector<MultiTensorLaunch>& plan,
                                                        const std::vector<int64_t>& sizes, int64_t chunk,
                                                        int max_tensors, int max_blocks) {
  std::vector<std::pair<int64_t, int32_t>> got;
  int64_t before = 0;
  for (size_t l = 0; l < plan.size(); ++l) {
    const MultiTensorLaunch& launch = plan[l];
    EXPECT_FALSE(launch.blocks.empty()) << "launch " << l << " has no block";
    EXPECT_LE(static_cast<int>(launch.tensors.size()), max_tensors) << "launch " << l;
    EXPECT_LE(static_cast<int>(launch.blocks.size()), max_blocks) << "launch " << l;
    EXPECT_EQ(launch.first_block, before) << "launch " << l;
    before += static_cast<int64_t>(launch.blocks.size());
    for (size_t s = 1; s < launch.tensors.size(); ++s)
      EXPECT_LT(launch.tensors[s - 1], launch.tensors[s]) << "launch " << l << ": slots out of list order";
    std::vector<int> blocks_of_slot(launch.tensors.size(), 0);
    for (const MultiTensorBlock& b : launch.blocks) {
      EXPECT_GE(b.slot, 0);
      EXPECT_LT(b.slot, static_cast<int32_t>(launch.tensors.size()));
      ++blocks_of_slot[static_cast<size_t>(b.slot)];
      const int64_t t = launch.tensors[static_cast<size_t>(b.slot)];
      EXPECT_GT(sizes[static_cast<size_t>(t)], 0) << "an empty tensor got a block";
      EXPECT_LT(static_cast<int64_t>(b.chunk) * chunk, sizes[static_cast<size_t>(t)]) << "chunk past the end";
      got.emplace_back(t, b.chunk);
    }
    for (size_t s = 0; s < blocks_of_slot.size(); ++s)
      EXPECT_GT(blocks_of_slot[s], 0) << "slot without block";
  }
  EXPECT_EQ(plan_block_count(plan), before);
  // Exactly the pairs of the list, in list order and chunks ascending.
  std::vector<std::pair<int64_t, int32_t>> want;
  for (size_t i = 0; i < sizes.size(); ++i)
    for (int64_t c = 0; c * chunk < sizes[i]; ++c)
      want.emplace_back(static_cast<int64_t>(i), static_cast<int32_t>(c));
  EXPECT_EQ(got, want);
  return got;
}
}  // namespace

TEST(MultiTensorPlan, EdgeSizesAroundTheChunk) {
  const int64_t chunk = 8;
  EXPECT_TRUE(plan_multi_tensor({}, chunk, 4, 16).empty());
  EXPECT_TRUE(plan_multi_tensor({0, 0, 0}, chunk, 4, 16).empty()) << "empty tensors need no launch";
  for (auto [n, blocks] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {chunk - 1, 1}, {chunk, 1}, {chunk + 1, 2}, {2 * chunk, 2}, {2 * chunk + 1, 3}}) {
    const auto plan = plan_multi_tensor({n}, chunk, 4, 16);
    ASSERT_EQ(plan.size(), 1u) << "n = " << n;
    EXPECT_EQ(plan_block_count(plan), blocks) << "n = " << n;
    checked_blocks(plan, {n}, chunk, 4, 16);
  }
  const std::vector<int64_t> mixed = {0, 1, chunk - 1, 0, chunk, chunk + 1, 0};
  const auto plan = plan_multi_tensor(mixed, chunk, 8, 64);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].tensors, (std::vector<int64_t>{1, 2, 4, 5})) << "empty tensors get no slot";
  checked_blocks(plan, mixed, chunk, 8, 64);
}

TEST(MultiTensorPlan, PrimesUnderEveryTableRoom) {
  const std::vector<int64_t> primes = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 97, 101};
  for (int64_t chunk : {1, 2, 7, 16, 1000})
    for (int max_tensors : {1, 2, 3, 5, 64})
      for (int max_blocks : {1, 2, 3, 7, 1000}) {
        SCOPED_TRACE(::testing::Message()
                     << "chunk " << chunk << " tensors " << max_tensors << " blocks " << max_blocks);
        checked_blocks(plan_multi_tensor(primes, chunk, max_tensors, max_blocks), primes, chunk, max_tensors,
                       max_blocks);
      }
}

TEST(MultiTensorPlan, ManyTinyTensorsFillLaunchAfterLaunch) {
  const std::vector<int64_t> sizes(1000, 1);
  const auto plan = plan_multi_tensor(sizes, kMultiTensorChunk, 7, 100);
  ASSERT_EQ(plan.size(), 143u) << "1000 tensors, 7 a launch";
  for (size_t l = 0; l + 1 < plan.size(); ++l) EXPECT_EQ(plan[l].tensors.size(), 7u);
  EXPECT_EQ(plan.back().tensors.size(), 6u);
  checked_blocks(plan, sizes, kMultiTensorChunk, 7, 100);
}

TEST(MultiTensorPlan, OneHugeTensorContinuesAcrossLaunches) {
  const int64_t n = kMultiTensorChunk * 1000 + 3;  // 1001 chunks
  const auto plan = plan_multi_tensor({5, n, 5}, kMultiTensorChunk, 4, 64);
  // 1 + 1001 + 1 blocks, 64 a launch: 16 launches; the huge tensor has a slot in each.
  ASSERT_EQ(plan.size(), 16u);
  for (const auto& l : plan) EXPECT_NE(std::find(l.tensors.begin(), l.tensors.end(), 1), l.tensors.end());
  EXPECT_EQ(plan_block_count(plan), 1003);
  checked_blocks(plan, {5, n, 5}, kMultiTensorChunk, 4, 64);
}

TEST(MultiTensorPlan, MoreTensorsThanOneLaunchHoldsAtTheDeviceRoom) {
  // The CUDA build's room (kernels/cuda/multi_tensor.cu: 320 tensors, 1536 blocks with CUDA 12.1+).
  std::vector<int64_t> sizes;
  for (int i = 0; i < 1000; ++i) sizes.push_back((i * 7919) % 50000);  // a GPT-like mix, some empty
  const auto plan = plan_multi_tensor(sizes, kMultiTensorChunk, 320, 1536);
  EXPECT_GE(plan.size(), 4u);
  checked_blocks(plan, sizes, kMultiTensorChunk, 320, 1536);
  // The same sizes give the same plan (the sum of squares' partial order depends on it).
  const auto again = plan_multi_tensor(sizes, kMultiTensorChunk, 320, 1536);
  ASSERT_EQ(again.size(), plan.size());
  for (size_t l = 0; l < plan.size(); ++l) EXPECT_EQ(again[l].tensors, plan[l].tensors);
}

TEST(MultiTensorPlan, BadInputsNameTheProblem) {
  try {
    plan_multi_tensor({3, -1}, 8, 4, 4);
    FAIL() << "no error";
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 1 has a negative size -1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan_multi_tensor({3}, 0, 4, 4), ddp::Error);
  EXPECT_THROW(plan_multi_tensor({3}, 8, 0, 4), ddp::Error);
  EXPECT_THROW(plan_multi_tensor({3}, 8, 4, 0), ddp::Error);
}

TEST(MultiTensorSumOfSquares, CpuTwinEqualsAFloat64SumToRounding) {
  std::vector<std::vector<float>> f;
  std::vector<std::vector<double>> d;
  const std::vector<int64_t> sizes = {
      0,  1, 7, kMultiTensorChunk - 1, kMultiTensorChunk, kMultiTensorChunk + 1, 3 * kMultiTensorChunk + 17,
      101};
  long double exact_f = 0, exact_d = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    f.emplace_back();
    d.emplace_back();
    for (int64_t i = 0; i < sizes[k]; ++i) {
      const double x = std::sin(0.37 * static_cast<double>(i + 1) * static_cast<double>(k + 2)) * (1 + k);
      f.back().push_back(static_cast<float>(x));
      d.back().push_back(x);
      exact_f += static_cast<long double>(static_cast<float>(x)) * static_cast<float>(x);
      exact_d += static_cast<long double>(x) * x;
    }
  }
  std::vector<const float*> pf;
  std::vector<const double*> pd;
  for (size_t k = 0; k < sizes.size(); ++k) {
    pf.push_back(f[k].data());
    pd.push_back(d[k].data());
  }
  for (auto [tensors, blocks] : std::vector<std::pair<int, int>>{{320, 1536}, {2, 3}, {1, 1}}) {
    const double sf = chunked_sum_of_squares<float>(pf, sizes, tensors, blocks);
    const double sd = chunked_sum_of_squares<double>(pd, sizes, tensors, blocks);
    // float64 accumulation over ~66k terms: a few ulps of the total at most.
    EXPECT_NEAR(sf, static_cast<double>(exact_f), 1e-13 * static_cast<double>(exact_f));
    EXPECT_NEAR(sd, static_cast<double>(exact_d), 1e-13 * static_cast<double>(exact_d));
    EXPECT_EQ(sd, chunked_sum_of_squares<double>(pd, sizes, tensors, blocks)) << "the same bits every run";
  }
  EXPECT_EQ(chunked_sum_of_squares<double>({}, {}, 320, 1536), 0.0);
}

// test_cpu_allocator.cpp - the caching CPU allocator: size classes bound the slack, a freed block is reused
// for the next request of its class, the cache limit is honoured, and a steady-state training step (forward,
// backward, SGD step, zero_grad) is served entirely from the cache: no new system allocation after warm-up.
#include <gtest/gtest.h>

#include <memory>

#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"
#include "runtime/tensor/cpu_allocator.h"
#include "runtime/tensor/tensor.h"

using namespace ddp;

namespace {
bool caching_enabled() {
  const size_t limit = cpu_set_cache_limit(0);
  cpu_set_cache_limit(limit);
  return limit > 0;
}
}  // namespace

TEST(CpuAllocator, SizeClassesAre64ByteMultiplesWithAtMostAQuarterSlack) {
  for (size_t n = 1; n < (size_t{1} << 22); n = n * 3 / 2 + 1) {
    const size_t c = cpu_size_class(n);
    EXPECT_GE(c, n);
    EXPECT_EQ(c % 64, 0u) << n;
    EXPECT_LE(c, n + n / 4 + 64) << n;
    EXPECT_EQ(cpu_size_class(c), c) << "a class must map to itself: " << n;
  }
}

TEST(CpuAllocator, FreedBlockIsReusedForTheSameClass) {
  if (!caching_enabled()) GTEST_SKIP() << "caching is off (ASan build or DDP_CPU_CACHE_MB=0)";
  void* a = cpu_allocate(1000000);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  cpu_free(a, 1000000);
  const CpuAllocatorStats before = cpu_allocator_stats();
  void* b = cpu_allocate(999999);  // same class
  const CpuAllocatorStats after = cpu_allocator_stats();
  EXPECT_EQ(a, b);
  EXPECT_EQ(after.cache_hits, before.cache_hits + 1);
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  cpu_free(b, 999999);
}

TEST(CpuAllocator, LimitZeroReturnsBlocksToTheSystem) {
  const size_t old = cpu_set_cache_limit(0);
  EXPECT_EQ(cpu_allocator_stats().cached_bytes, 0u);
  void* a = cpu_allocate(1 << 20);
  cpu_free(a, 1 << 20);
  EXPECT_EQ(cpu_allocator_stats().cached_bytes, 0u);
  const CpuAllocatorStats before = cpu_allocator_stats();
  void* b = cpu_allocate(1 << 20);
  EXPECT_EQ(cpu_allocator_stats().system_allocations, before.system_allocations + 1);
  cpu_free(b, 1 << 20);
  cpu_set_cache_limit(old);
}

TEST(CpuAllocator, SteadyStateTrainingStepMakesNoSystemAllocation) {
  if (!caching_enabled()) GTEST_SKIP() << "caching is off (ASan build or DDP_CPU_CACHE_MB=0)";
  models::MLPConfig c;
  c.in = 20;
  c.hidden = {64, 64};
  c.out = 5;
  auto model = std::make_shared<models::MLP>(c);
  optim::SGD sgd(model->named_parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x = Tensor::randn({16, 20}, 7);
  Tensor y = Tensor::from_data<int64_t>({0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0}, {16});
  auto step = [&] {
    Tensor loss = ops::cross_entropy(model->forward(x), y);
    autograd::backward(loss);
    sgd.step();
    sgd.zero_grad();
  };
  step();
  step();
  const CpuAllocatorStats before = cpu_allocator_stats();
  for (int i = 0; i < 3; ++i) step();
  const CpuAllocatorStats after = cpu_allocator_stats();
  EXPECT_GT(after.allocations, before.allocations);
  EXPECT_EQ(after.system_allocations, before.system_allocations)
      << (after.allocations - before.allocations) << " allocations in 3 steps";
}

// test_bucket_sim.cpp - the bucket timeline on a toy model with answers worked out by hand, the ready-time
// estimate, the recommendation, the parameter cost rule and sample statistics; ZeRO's reduce-scatter buckets
// and a given layout (ZeRO-3's units).
#include <gtest/gtest.h>

#include "runtime/core/error.h"
#include "runtime/sim/bucket_sim.h"
#include "runtime/sim/param_list.h"
#include "runtime/sim/sample_stats.h"

namespace ddp::sim {
namespace {

constexpr int64_t kMiB = 1 << 20;

// Three 1 MiB parameters A, B, C (registration order); gradients arrive C at 1 s, B at 2 s, A at 3 s.
// Network: 2 ranks, ring, alpha 0, B = 1 MiB/s, so a bucket of k MiB takes k seconds.
struct Toy {
  std::vector<SimParam> params{
      {"A", kMiB, DType::F32, 1}, {"B", kMiB, DType::F32, 1}, {"C", kMiB, DType::F32, 1}};
  std::vector<double> ready{3, 2, 1};
  ComputeTimes compute{0.5, 3, 0.25};
  SimOptions opt;
  Toy() {
    opt.world = 2;
    opt.network.alpha_s = 0;
    opt.network.bandwidth_bytes_per_s = kMiB;
  }
};

TEST(BucketSim, ToyTimelineWithOverlap) {
  Toy t;
  // First bucket capped at 1 MiB: {C}; cap 2 MiB: {B, A}.
  auto r = simulate_step(t.params, t.ready, 2.0, t.compute, t.opt);
  ASSERT_EQ(r.buckets.size(), 2u);
  EXPECT_EQ(r.buckets[0].params, (std::vector<size_t>{2}));
  EXPECT_EQ(r.buckets[1].params, (std::vector<size_t>{1, 0}));
  EXPECT_DOUBLE_EQ(r.buckets[0].launch_s, 1);
  EXPECT_DOUBLE_EQ(r.buckets[0].end_s, 2);
  EXPECT_DOUBLE_EQ(r.buckets[1].launch_s, 3);
  EXPECT_DOUBLE_EQ(r.buckets[1].end_s, 5);
  EXPECT_DOUBLE_EQ(r.backward_end_s, 3);
  EXPECT_DOUBLE_EQ(r.exposed_s, 2);
  EXPECT_DOUBLE_EQ(r.comm_busy_s, 3);
  EXPECT_DOUBLE_EQ(r.step_s, 0.5 + 3 + 2 + 0.25);
}

TEST(BucketSim, ToyTimelineSmallBucketsOverlapMore) {
  Toy t;
  // Cap 0.5 MiB: {C}, {B}, {A}; B's bucket runs 2..3, A's 3..4.
  auto r = simulate_step(t.params, t.ready, 0.5, t.compute, t.opt);
  ASSERT_EQ(r.buckets.size(), 3u);
  EXPECT_DOUBLE_EQ(r.buckets[1].start_s, 2);
  EXPECT_DOUBLE_EQ(r.buckets[2].end_s, 4);
  EXPECT_DOUBLE_EQ(r.exposed_s, 1);
  EXPECT_DOUBLE_EQ(r.step_s, 4.75);
}

TEST(BucketSim, ReduceScatterBucketsTakeHalfTheRingAndAGivenLayoutIgnoresTheCap) {
  Toy t;
  // Reduce-scatter over 2 ranks: (n-1)/n * bytes / B = half a second per MiB. Buckets {C}, {B, A} as in the
  // overlap case: C's runs 1..1.5, {B, A}'s 3..4, exposed 1 s.
  t.opt.collective = Collective::ReduceScatter;
  auto r = simulate_step(t.params, t.ready, 2.0, t.compute, t.opt);
  ASSERT_EQ(r.buckets.size(), 2u);
  EXPECT_DOUBLE_EQ(r.buckets[0].end_s, 1.5);
  EXPECT_DOUBLE_EQ(r.buckets[1].end_s, 4);
  EXPECT_DOUBLE_EQ(r.exposed_s, 1);
  // The given layout {C, B}, {A} at any cap: {C, B} is full at 2 s and runs 2..3, {A} 3..3.5.
  auto given = simulate_layout(t.params, t.ready, {{2, 1}, {0}}, t.compute, t.opt);
  ASSERT_EQ(given.buckets.size(), 2u);
  EXPECT_EQ(given.cap_mb, 0.0);
  EXPECT_DOUBLE_EQ(given.buckets[0].end_s, 3);
  EXPECT_DOUBLE_EQ(given.buckets[1].end_s, 3.5);
  EXPECT_DOUBLE_EQ(given.exposed_s, 0.5);
  // Every parameter exactly once.
  EXPECT_THROW(simulate_layout(t.params, t.ready, {{2, 1}}, t.compute, t.opt), Error);
  EXPECT_THROW(simulate_layout(t.params, t.ready, {{2, 1}, {0, 1}}, t.compute, t.opt), Error);
  EXPECT_THROW(simulate_layout(t.params, t.ready, {{2, 1, 0}, {}}, t.compute, t.opt), Error);
}

TEST(BucketSim, BucketsArePackedInReadyOrderOrAsAReducerThatHasNotRebuilt) {
  Toy t;
  t.ready = {1, 2, 3};  // A first: the ready order is A, B, C; reverse registration order C, B, A
  auto by_ready = simulate_step(t.params, t.ready, 2.0, t.compute, t.opt);
  ASSERT_EQ(by_ready.buckets.size(), 2u);
  EXPECT_EQ(by_ready.buckets[0].params, (std::vector<size_t>{0}));
  EXPECT_EQ(by_ready.buckets[1].params, (std::vector<size_t>{1, 2}));
  t.opt.pack_in_ready_order = false;  // ZeRO-2: the reducer keeps its first layout
  auto kept = simulate_step(t.params, t.ready, 2.0, t.compute, t.opt);
  ASSERT_EQ(kept.buckets.size(), 2u);
  EXPECT_EQ(kept.buckets[0].params, (std::vector<size_t>{2}));
  EXPECT_EQ(kept.buckets[1].params, (std::vector<size_t>{1, 0}));
  EXPECT_DOUBLE_EQ(kept.buckets[0].launch_s, 3);  // C, ready last, is in the first bucket
}

TEST(BucketSim, ToyTimelineWithoutOverlapSerializesAfterBackward) {
  Toy t;
  t.opt.overlap = false;
  auto r = simulate_step(t.params, t.ready, 2.0, t.compute, t.opt);
  EXPECT_DOUBLE_EQ(r.buckets[0].start_s, 3);
  EXPECT_DOUBLE_EQ(r.buckets[1].start_s, 4);  // the single channel: waits for bucket 0
  EXPECT_DOUBLE_EQ(r.exposed_s, 3);
  EXPECT_DOUBLE_EQ(r.step_s, 6.75);
}

TEST(BucketSim, ChannelSerializesBucketsThatAreReadyTogether) {
  Toy t;
  t.ready = {1, 1, 1};  // all ready at once: buckets {C}, {B}, {A} queue on the channel
  auto r = simulate_step(t.params, t.ready, 0.5, t.compute, t.opt);
  ASSERT_EQ(r.buckets.size(), 3u);
  EXPECT_DOUBLE_EQ(r.buckets[0].end_s, 2);
  EXPECT_DOUBLE_EQ(r.buckets[1].start_s, 2);
  EXPECT_DOUBLE_EQ(r.buckets[2].start_s, 3);
  EXPECT_DOUBLE_EQ(r.comm_end_s, 4);
  EXPECT_DOUBLE_EQ(r.exposed_s, 1);  // backward ends at 3
}

TEST(BucketSim, GradientCopiesDelayBackwardAndAddWriteBack) {
  Toy t;
  t.opt.copy_bytes_per_s = 4.0 * kMiB;  // each 1 MiB copy takes 0.25 s
  auto r = simulate_step(t.params, t.ready, 2.0, t.compute, t.opt);
  EXPECT_DOUBLE_EQ(r.buckets[0].ready_s, 1.25);         // C at 1 + its copy
  EXPECT_DOUBLE_EQ(r.buckets[1].ready_s, 3.75);         // A at 3 + three copies
  EXPECT_DOUBLE_EQ(r.backward_end_s, 3.75);             // backward + every copy
  EXPECT_DOUBLE_EQ(r.exposed_s, (5.75 - 3.75) + 0.75);  // comm tail + write-back of 3 MiB
}

TEST(BucketSim, BadInputsAreErrors) {
  Toy t;
  EXPECT_THROW(simulate_step(t.params, {1, 2}, 1, t.compute, t.opt), Error);
  EXPECT_THROW(simulate_step(t.params, t.ready, 0, t.compute, t.opt), Error);
  EXPECT_THROW(simulate_step({}, {}, 1, t.compute, t.opt), Error);
  t.opt.world = 0;
  EXPECT_THROW(simulate_step(t.params, t.ready, 1, t.compute, t.opt), Error);
}

TEST(BucketSim, EstimatedReadyTimesFollowCostInReverseOrder) {
  std::vector<SimParam> p{{"a", 4, DType::F32, 1}, {"b", 4, DType::F32, 1}, {"c", 4, DType::F32, 2}};
  auto r = estimate_ready_times(p, 4.0);
  EXPECT_DOUBLE_EQ(r[2], 2.0);
  EXPECT_DOUBLE_EQ(r[1], 3.0);
  EXPECT_DOUBLE_EQ(r[0], 4.0);
  for (auto& q : p) q.backward_cost = 0;  // no costs: evenly spread
  r = estimate_ready_times(p, 3.0);
  EXPECT_NEAR(r[2], 1.0, 1e-12);
  EXPECT_NEAR(r[0], 3.0, 1e-12);
}

TEST(BucketSim, RecommendationPicksTheLowestPredictedStep) {
  Toy t;
  auto results = sweep_caps(t.params, t.ready, {4, 0.5, 2}, t.compute, t.opt);
  ASSERT_EQ(results.size(), 3u);
  const size_t best = recommend_cap(results);
  EXPECT_EQ(best, 1u);
  for (auto& r : results) EXPECT_LE(results[best].step_s, r.step_s);
  std::vector<SimResult> fake(3);
  fake[0].step_s = 3;
  fake[1].step_s = 1;
  fake[2].step_s = 1;  // a tie keeps the first
  EXPECT_EQ(recommend_cap(fake), 1u);
  EXPECT_THROW(recommend_cap({}), Error);
  const std::string table = format_sweep(results, best, 128);
  EXPECT_NE(table.find("recommended"), std::string::npos);
}

TEST(ParamList, CostRuleAndBytes) {
  auto p = sim_params_from_shapes({{"wte.weight", {256, 128}, DType::F32},
                                   {"blocks.0.attn.qkv.weight", {384, 128}, DType::BF16},
                                   {"blocks.0.ln1.bias", {128}, DType::F32}});
  EXPECT_EQ(p[0].bytes, 256 * 128 * 4);
  EXPECT_DOUBLE_EQ(p[0].backward_cost, 128);  // embedding: one row per token
  EXPECT_EQ(p[1].bytes, 384 * 128 * 2);
  EXPECT_DOUBLE_EQ(p[1].backward_cost, 384 * 128);
  EXPECT_DOUBLE_EQ(p[2].backward_cost, 128);
  EXPECT_THROW(sim_params_from_shapes({{"x", {-1}, DType::F32}}), Error);
}

TEST(SampleStats, PercentilesInterpolate) {
  auto s = summarize({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.p10, 1.3);
  EXPECT_DOUBLE_EQ(s.p90, 3.7);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 4);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_THROW(summarize({}), Error);
}

}  // namespace
}  // namespace ddp::sim

namespace ddp::sim {
namespace {

TEST(BucketSim, CommunicationSharingTheCoreStretchesBackward) {
  Toy t;
  t.opt.comm_cpu_share = 0.5;
  // Bucket {C} runs 1..2 while backward runs: backward loses 0.5 s. A's gradient (compute time 3) is ready at
  // wall 3.5; bucket {B, A} runs 3.5..5.5; exposed 2; step 0.5 + 3.5 + 2 + 0.25.
  auto r = simulate_step(t.params, t.ready, 2.0, t.compute, t.opt);
  EXPECT_DOUBLE_EQ(r.buckets[0].ready_s, 1);
  EXPECT_DOUBLE_EQ(r.buckets[1].ready_s, 3.5);
  EXPECT_DOUBLE_EQ(r.backward_end_s, 3.5);
  EXPECT_DOUBLE_EQ(r.exposed_s, 2);
  EXPECT_DOUBLE_EQ(r.step_s, 6.25);
  // A full core: backward stops while {C} runs; B (compute 2) is ready at wall 3, A at 4.
  t.opt.comm_cpu_share = 1.0;
  r = simulate_step(t.params, t.ready, 0.5, t.compute, t.opt);
  ASSERT_EQ(r.buckets.size(), 3u);
  EXPECT_DOUBLE_EQ(r.buckets[1].ready_s, 3);
  EXPECT_DOUBLE_EQ(r.buckets[1].end_s, 4);
  EXPECT_DOUBLE_EQ(r.buckets[2].ready_s, 5);  // compute 3 = 1 (before C) + 1 (2..3) + 1 (after B's 3..4)
  EXPECT_DOUBLE_EQ(r.backward_end_s, 5);
  // Without overlap nothing competes: the share does not matter.
  t.opt.overlap = false;
  EXPECT_DOUBLE_EQ(simulate_step(t.params, t.ready, 2.0, t.compute, t.opt).step_s, 6.75);
  t.opt.comm_cpu_share = 1.5;
  EXPECT_THROW(simulate_step(t.params, t.ready, 2.0, t.compute, t.opt), Error);
}

}  // namespace
}  // namespace ddp::sim

namespace ddp::sim {
namespace {

TEST(BucketSim, LastBucketAfterBackwardIsExposedDespiteRounding) {
  // Awkward decimal times: the bucket launched at the end of backward must not count as stretching it.
  std::vector<SimParam> p{{"w0", 3 * kMiB, DType::F32, 0.3}, {"w1", 4 * kMiB, DType::F32, 0.7}};
  SimOptions o;
  o.world = 2;
  o.network.alpha_s = 0.0001708;
  o.network.bandwidth_bytes_per_s = 1.146e9;
  o.copy_bytes_per_s = 17e9;
  o.comm_cpu_share = 1;
  for (double bwd : {0.014, 0.0140000001, 0.01807, 0.1}) {
    auto ready = estimate_ready_times(p, bwd);
    auto r = simulate_step(p, ready, 25, {0.0087, bwd, 0.0018}, o);
    ASSERT_EQ(r.buckets.size(), 2u);
    const double last = r.buckets[1].end_s - r.buckets[1].start_s;
    EXPECT_NEAR(r.buckets[1].start_s, r.backward_end_s, 1e-12) << bwd;
    EXPECT_GE(r.exposed_s, last) << bwd;
  }
}

}  // namespace
}  // namespace ddp::sim

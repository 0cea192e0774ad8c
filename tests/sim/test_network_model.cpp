// test_network_model.cpp - the ring and tree all-reduce formulas and the reduce-scatter on hand-computed
// cases, and the alpha-beta fit of either collective.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/core/error.h"
#include "runtime/sim/network_model.h"

namespace ddp::sim {
namespace {

NetworkModel model(AllreduceAlgorithm a, double alpha, double bw) {
  NetworkModel m;
  m.algorithm = a;
  m.alpha_s = alpha;
  m.bandwidth_bytes_per_s = bw;
  return m;
}

TEST(NetworkModel, RingHandComputed) {
  // n = 4: 2(n-1)/n = 1.5 times 8e6 B / 1e9 B/s = 12 ms of transfer, plus 2(n-1) = 6 latencies of 1 ms
  // -> 18 ms.
  auto m = model(AllreduceAlgorithm::Ring, 1e-3, 1e9);
  EXPECT_NEAR(m.allreduce_seconds(8e6, 4), 0.018, 1e-12);
  // n = 2: bytes/B + 2 alpha = 8 ms + 2 ms.
  EXPECT_NEAR(m.allreduce_seconds(8e6, 2), 0.010, 1e-12);
  // n = 1000: 2*999/1000 * 1e6/1e9 + 1998 * 1e-3.
  EXPECT_NEAR(m.allreduce_seconds(1e6, 1000), 1.998e-3 + 1.998, 1e-9);
}

TEST(NetworkModel, TreeHandComputed) {
  auto m = model(AllreduceAlgorithm::Tree, 1e-3, 1e9);
  // n = 8: 2 * 3 * (1 ms + 8 ms) = 54 ms.
  EXPECT_NEAR(m.allreduce_seconds(8e6, 8), 0.054, 1e-12);
  // n = 2: 2 * 1 * (1 ms + 8 ms).
  EXPECT_NEAR(m.allreduce_seconds(8e6, 2), 0.018, 1e-12);
  // n = 4096: 2 * 12 * (1 ms + 1 ms).
  EXPECT_NEAR(m.allreduce_seconds(1e6, 4096), 0.048, 1e-12);
}

TEST(NetworkModel, ReduceScatterIsTheRingsFirstHalf) {
  // n = 4: (n-1)/n = 0.75 times 8e6 B / 1e9 B/s = 6 ms, plus n-1 = 3 latencies of 1 ms -> 9 ms; the same
  // with the tree all-reduce (reduce-scatter runs as a ring).
  for (auto a : {AllreduceAlgorithm::Ring, AllreduceAlgorithm::Tree}) {
    auto m = model(a, 1e-3, 1e9);
    EXPECT_NEAR(m.reduce_scatter_seconds(8e6, 4), 0.009, 1e-12);
    EXPECT_NEAR(m.seconds(Collective::ReduceScatter, 8e6, 2), 0.005, 1e-12);
    EXPECT_EQ(m.reduce_scatter_seconds(8e6, 1), 0.0);
  }
  EXPECT_STREQ(collective_name(Collective::ReduceScatter), "reduce-scatter");
  // Points of reduce-scatters fitted as such give the network back; fitted as all-reduces they would give
  // twice the bandwidth and latency per step.
  auto truth = model(AllreduceAlgorithm::Ring, 250e-6, 0.8e9);
  std::vector<MeasuredAllreduce> pts;
  for (double b = 4096; b <= 64e6; b *= 4) pts.push_back({b, truth.reduce_scatter_seconds(b, 4)});
  auto fit = fit_network_model(pts, 4, AllreduceAlgorithm::Ring, Collective::ReduceScatter);
  EXPECT_NEAR(fit.alpha_s, truth.alpha_s, 1e-9);
  EXPECT_NEAR(fit.bandwidth_bytes_per_s / truth.bandwidth_bytes_per_s, 1.0, 1e-9);
  auto as_allreduce = fit_network_model(pts, 4, AllreduceAlgorithm::Ring);
  EXPECT_NEAR(as_allreduce.bandwidth_bytes_per_s / truth.bandwidth_bytes_per_s, 2.0, 1e-9);
}

TEST(NetworkModel, OneRankCostsNothingAndBadInputsAreErrors) {
  auto m = model(AllreduceAlgorithm::Ring, 1e-3, 1e9);
  EXPECT_EQ(m.allreduce_seconds(1e9, 1), 0.0);
  EXPECT_THROW(m.allreduce_seconds(1, 0), Error);
  EXPECT_THROW(m.allreduce_seconds(-1, 2), Error);
  EXPECT_THROW(parse_algorithm("butterfly"), Error);
  EXPECT_EQ(parse_algorithm("tree"), AllreduceAlgorithm::Tree);
}

TEST(NetworkModel, FitRecoversTheParametersOfExactPoints) {
  for (auto algo : {AllreduceAlgorithm::Ring, AllreduceAlgorithm::Tree}) {
    for (int world : {2, 8, 64}) {
      auto truth = model(algo, 250e-6, 0.8e9);
      std::vector<MeasuredAllreduce> pts;
      for (double b = 4096; b <= 64e6; b *= 4) pts.push_back({b, truth.allreduce_seconds(b, world)});
      auto fit = fit_network_model(pts, world, algo);
      EXPECT_NEAR(fit.alpha_s, truth.alpha_s, 1e-9) << algorithm_name(algo) << " world " << world;
      EXPECT_NEAR(fit.bandwidth_bytes_per_s / truth.bandwidth_bytes_per_s, 1.0, 1e-9);
    }
  }
}

TEST(NetworkModel, FitOfTheMachineFactsGivesTheDocumentedDefaults) {
  // 1 MiB in 4.3 ms and 25 MiB in 34 ms, 2 ranks (docs/simulator.md).
  auto fit = fit_network_model({{1 << 20, 4.3e-3}, {25 << 20, 34e-3}}, 2, AllreduceAlgorithm::Ring);
  EXPECT_NEAR(fit.alpha_s * 1e6, 1531, 1);
  EXPECT_NEAR(fit.bandwidth_bytes_per_s / 1e9, 0.847, 0.001);
}

TEST(NetworkModel, FitRejectsUselessPoints) {
  EXPECT_THROW(fit_network_model({{100, 1}}, 2, AllreduceAlgorithm::Ring), Error);
  EXPECT_THROW(fit_network_model({{100, 1}, {100, 2}}, 2, AllreduceAlgorithm::Ring), Error);
  EXPECT_THROW(fit_network_model({{100, 2}, {200, 1}}, 2, AllreduceAlgorithm::Ring), Error);
  EXPECT_THROW(fit_network_model({{100, 1}, {200, 2}}, 1, AllreduceAlgorithm::Ring), Error);
  // Negative intercept: clamped to alpha 0, slope through the origin.
  auto fit = fit_network_model({{1000, 0.5e-6}, {2000, 2e-6}}, 2, AllreduceAlgorithm::Ring);
  EXPECT_EQ(fit.alpha_s, 0.0);
  EXPECT_GT(fit.bandwidth_bytes_per_s, 0.0);
}

}  // namespace
}  // namespace ddp::sim

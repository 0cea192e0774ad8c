// test_in_training_fit.cpp - the network fit with several all-reduces per measurement, and the in-training
// calibration from nooverlap runs' exposed communication, on hand-computed cases.
#include <gtest/gtest.h>

#include "runtime/core/error.h"
#include "runtime/sim/in_training_fit.h"

namespace ddp::sim {
namespace {

TEST(InTrainingFit, CountedPointsSeparateLatencyFromBandwidth) {
  // Ring, 2 ranks: each all-reduce costs 2 alpha + bytes / B. With alpha 1 ms and B 1 GB/s:
  // 2 all-reduces moving 8 MB in all: 4 ms + 8 ms = 12 ms; 4 all-reduces moving 2 MB: 8 ms + 2 ms = 10 ms.
  auto fit = fit_network_model({{8e6, 12e-3, 2}, {2e6, 10e-3, 4}}, 2, AllreduceAlgorithm::Ring);
  EXPECT_NEAR(fit.alpha_s, 1e-3, 1e-12);
  EXPECT_NEAR(fit.bandwidth_bytes_per_s, 1e9, 1e-3);
  // Same bytes per all-reduce (2 x 4 MB, 4 x 4 MB): latency and bandwidth are not separable.
  EXPECT_THROW(fit_network_model({{8e6, 12e-3, 2}, {16e6, 24e-3, 4}}, 2, AllreduceAlgorithm::Ring), Error);
  EXPECT_THROW(fit_network_model({{8e6, 12e-3, 0}, {2e6, 10e-3, 4}}, 2, AllreduceAlgorithm::Ring), Error);
}

TEST(InTrainingFit, WriteBackIsTakenOffBeforeTheFit) {
  // The cases above plus the write-back at 8 GB/s: 8 MB -> 1 ms, 2 MB -> 0.25 ms.
  std::vector<ExposedCommunication> runs{{"mlp nooverlap", 2, 8e6, 13e-3},
                                         {"gpt nooverlap", 4, 2e6, 10.25e-3}};
  auto fit = fit_in_training_network(runs, 2, AllreduceAlgorithm::Ring, 8e9);
  EXPECT_NEAR(fit.alpha_s, 1e-3, 1e-12);
  EXPECT_NEAR(fit.bandwidth_bytes_per_s, 1e9, 1e-3);
  // Ignoring the write-back (copies free) attributes it to the network: a different fit.
  auto free_copies = fit_in_training_network(runs, 2, AllreduceAlgorithm::Ring, 0);
  EXPECT_GT(std::abs(free_copies.alpha_s - 1e-3) + std::abs(free_copies.bandwidth_bytes_per_s - 1e9) / 1e12,
            1e-6);
}

TEST(InTrainingFit, BadRunsAreErrorsNamingTheRun) {
  EXPECT_THROW(fit_in_training_network({{"one", 2, 8e6, 13e-3}}, 2, AllreduceAlgorithm::Ring, 8e9), Error);
  // 1 ms exposed but 8 MB at 8 GB/s is 1 ms of write-back alone.
  try {
    fit_in_training_network({{"short run", 2, 8e6, 1e-3}, {"b", 4, 2e6, 10.25e-3}}, 2,
                            AllreduceAlgorithm::Ring, 8e9);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("short run"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fit_in_training_network({{"a", 0, 8e6, 13e-3}, {"b", 4, 2e6, 10.25e-3}}, 2,
                                       AllreduceAlgorithm::Ring, 8e9),
               Error);
  EXPECT_THROW(fit_in_training_network({{"a", 2, 8e6, 13e-3}, {"b", 4, 2e6, 10.25e-3}}, 2,
                                       AllreduceAlgorithm::Ring, -1),
               Error);
}

}  // namespace
}  // namespace ddp::sim

// test_bench_e2e_zero.cpp - `bench_e2e --zero {0,1,2,3}` at world 2 (ddprun, shm) on a small GPT: each stage
// runs, and its JSON record holds the memory account - parameter + gradient + optimizer bytes of rank 0 and
// of every rank, within 5% of the ZeRO formula (the padding of the shards is all that may differ), the
// bucket, gathered and resident peaks, and the gather wait per step (zero for stages 0/1). A smoke test: no
// timing is checked. A flag the sharded stages cannot take, and a stage that does not exist, are refused by
// name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/run_process.h"

namespace {
namespace fs = std::filesystem;

ddp::testing::ProcessResult two_ranks(const std::string& flags) {
  std::vector<std::string> argv = {ddp::testing::ddprun_path(), "--standalone", "--nproc-per-node", "2",
                                   std::string(DDP_BIN_DIR) + "/bench_e2e"};
  std::istringstream in(flags);
  for (std::string f; in >> f;) argv.push_back(f);
  ddp::testing::ProcessOptions o;
  o.set_env = {{"OPENBLAS_NUM_THREADS", "1"}};
  o.unset_env = {"DDP_EXPLAIN", "DDP_DEBUG"};
  o.timeout_s = 60;
  return ddp::testing::run_process(argv, o);
}

const char* kSmallGpt =
    "--config gpt --gpt-width 64 --gpt-depth 2 --gpt-context 16 --batch-size 2 --warmup 1 --steps 2 "
    "--threads 1";

}  // namespace

TEST(BenchE2eZero, EveryStageRunsAndRecordsTheMemoryAccountBesideTheFormula) {
  if (!fs::exists(std::string(DDP_BIN_DIR) + "/bench_e2e"))
    GTEST_SKIP() << "bin/bench_e2e not built (DDP_BUILD_BENCH=OFF)";
  const fs::path json = fs::temp_directory_path() / ("ddp_e2e_zero_" + std::to_string(::getpid()) + ".jsonl");
  fs::remove(json);
  for (int stage = 0; stage <= 3; ++stage) {
    const auto r =
        two_ranks(std::string(kSmallGpt) + " --zero " + std::to_string(stage) + " --json " + json.string());
    ASSERT_EQ(r.exit_code, 0) << "--zero " << stage << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("ZeRO-" + std::to_string(stage) + ", world 2"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("ZeRO formula"), std::string::npos) << r.out;
  }
  std::ifstream in(json);
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  fs::remove(json);
  ASSERT_EQ(records.size(), 4u) << "one record per run, from rank 0";
  for (int stage = 0; stage <= 3; ++stage) {
    const auto& rec = records[static_cast<size_t>(stage)];
    SCOPED_TRACE("--zero " + std::to_string(stage));
    EXPECT_EQ(rec["zero"], stage);
    ASSERT_TRUE(rec.contains("memory"));
    const auto& m = rec["memory"];
    EXPECT_EQ(m["stage"], stage);
    EXPECT_EQ(m["world"], 2);
    EXPECT_EQ(m["num_params"], rec["params"]);
    EXPECT_EQ(m["optimizer_bytes_per_param"], 8) << "AdamW in float32: two moments";
    const double predicted = m["predicted_bytes"], measured = m["measured_bytes"];
    EXPECT_EQ(measured, m["parameter_bytes"].get<double>() + m["gradient_bytes"].get<double>() +
                            m["optimizer_bytes"].get<double>());
    EXPECT_LT(std::abs(measured / predicted - 1), 0.05) << measured << " vs " << predicted;
    ASSERT_EQ(m["resident_peak_bytes_per_rank"].size(), 2u);
    ASSERT_EQ(m["measured_bytes_per_rank"].size(), 2u);
    for (int r = 0; r < 2; ++r) {
      EXPECT_GT(m["resident_peak_bytes_per_rank"][r].get<double>(), measured) << "rank " << r;
      EXPECT_LT(std::abs(m["measured_bytes_per_rank"][r].get<double>() / predicted - 1), 0.05)
          << "rank " << r;
    }
    EXPECT_GT(m["bucket_peak_bytes"].get<double>(), 0);
    if (stage == 3)
      EXPECT_GT(m["gathered_peak_bytes"].get<double>(), 0);
    else
      EXPECT_EQ(m["gathered_peak_bytes"], 0);
    ASSERT_TRUE(rec.contains("gather_wait_s"));
    if (stage < 2) EXPECT_EQ(rec["gather_wait_s"]["max"], 0.0);
    EXPECT_EQ(rec.contains("prefetch"), stage == 3);
  }
  // The formula's ordering at world 2: each stage holds less than the one before (the gradient shard of
  // stage 2 and the parameter shard of stage 3).
  for (int stage = 1; stage <= 3; ++stage)
    EXPECT_LT(records[static_cast<size_t>(stage)]["memory"]["measured_bytes"].get<double>(),
              records[static_cast<size_t>(stage - 1)]["memory"]["measured_bytes"].get<double>());
}

TEST(BenchE2eZero, ShardedStagesRefuseBucketViewsAndAnUnknownStageByName) {
  if (!fs::exists(std::string(DDP_BIN_DIR) + "/bench_e2e"))
    GTEST_SKIP() << "bin/bench_e2e not built (DDP_BUILD_BENCH=OFF)";
  ddp::testing::ProcessOptions o;
  o.unset_env = {"LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  o.timeout_s = 30;
  const auto r = ddp::testing::run_process({std::string(DDP_BIN_DIR) + "/bench_e2e", "--config", "gpt",
                                            "--zero", "2", "--gradient-as-bucket-view"},
                                           o);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("--zero 2 reduces by reduce-scatter: drop --gradient-as-bucket-view"),
            std::string::npos)
      << r.err;
  const auto bad = ddp::testing::run_process({std::string(DDP_BIN_DIR) + "/bench_e2e", "--zero", "4"}, o);
  EXPECT_EQ(bad.exit_code, 1) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("--zero 4: expected 0, 1, 2 or 3"), std::string::npos) << bad.err;
}

// test_ft_runs.cpp - fault-tolerant training end to end under `ddprun --fault-tolerant` (docs/fault-tolerance.md):
// the float64 equivalence (a rank killed at step s and replaced later ends equal to one process on the same
// batches, checked by `train --ft-check`) on each CPU backend, a world below --min-ranks (a named error on every
// rank, the lost ranks named), a slow rank that is NOT thrown out, a replacement that cannot reach the store,
// and the refusals by name. The seeded campaign over many kills is FaultTolerance.Campaign (tools/ft_campaign.py).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <tuple>
#include <fstream>
#include <iterator>

#include "tests/support/run_process.h"

namespace ddp {
namespace {

using testing::ProcessOptions;
using testing::run_process;

const std::vector<std::string> kModel = {"--model", "mlp", "--hidden", "32", "--depth", "1", "--data", "synthetic",
                                         "--synthetic-samples", "384", "--batch-size", "8", "--steps", "0",
                                         "--epochs", "2", "--optimizer", "sgd", "--momentum", "0.9", "--dtype",
                                         "float64", "--log-interval", "0"};

ProcessOptions with_timeout(double seconds) {
  ProcessOptions po;
  po.timeout_s = seconds;
  return po;
}

std::string train_path() { return std::string(DDP_BIN_DIR) + "/train"; }

std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "ft_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  return d;
}

std::vector<std::string> ddprun_train(std::vector<std::string> launch, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {testing::ddprun_path(), "--fault-tolerant", "--standalone"};
  argv.insert(argv.end(), launch.begin(), launch.end());
  argv.push_back(train_path());
  argv.push_back("--fault-tolerant");
  argv.insert(argv.end(), kModel.begin(), kModel.end());
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

testing::ProcessResult check(const std::string& dir) {
  std::vector<std::string> argv = {train_path()};
  argv.insert(argv.end(), kModel.begin(), kModel.end());
  argv.push_back("--ft-check");
  argv.push_back(dir);
  return run_process(argv, with_timeout(60));
}

// (backend, --zero): the plain DDP state and ZeRO-1's sharded state with a buddy copy of each shard.
class FaultTolerantRun : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Rank 1 is killed inside backward of step 4 (buckets in flight) and replaced; the run ends with every rank's
// parameters bitwise equal and equal to one process trained on the committed global batches.
TEST_P(FaultTolerantRun, KilledAndReplacedEqualsOneProcessOnTheSameBatches) {
  const auto [backend, zero] = GetParam();
  const std::string dir = fresh_dir("equiv_" + backend + std::to_string(zero));
  ProcessOptions po = with_timeout(90);
  po.set_env["DDP_FT_TEST_STEP_SLEEP_MS"] = "20";
  if (backend == "gloo") po.set_env["DDP_SHM"] = "0";
  const std::string world = zero ? "4" : "3";
  const auto r = run_process(ddprun_train({"--nproc-per-node", world, "--replacements", "1"},
                                          {"--ft-log", dir, "--zero", std::to_string(zero), "--ft-fault",
                                           zero ? "slot=1,step=4,phase=optimizer" : "slot=1,step=4,phase=backward"}),
                             po);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("membership epoch 1 "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1 lost (SIGKILL (signal 9)); world " + world), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1 joined (incarnation 1)"), std::string::npos) << r.err;
  // step 4 redone, or step 5 when the killed rank's last bucket was already in its peers' hands (shm reads it
  // in place) and the survivors committed step 4
  EXPECT_NE(r.out.find(" redone over world"), std::string::npos) << r.out;
  std::vector<std::string> argv = {train_path()};
  argv.insert(argv.end(), kModel.begin(), kModel.end());
  argv.insert(argv.end(), {"--zero", std::to_string(zero), "--ft-check", dir});
  const auto c = run_process(argv, with_timeout(60));
  EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
  EXPECT_NE(c.out.find("final.slot1.inc1.bin: bitwise equal"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("each sample used exactly once"), std::string::npos) << c.out;
}

INSTANTIATE_TEST_SUITE_P(BackendsAndZero, FaultTolerantRun,
                         ::testing::Combine(::testing::Values("shm", "gloo"), ::testing::Values(0, 1)));

// ZeRO-1: the owner of a shard and its buddy (the next owning rank) lost together take the shard's state with
// them: every rank stops naming it, instead of training on with a state reset to zero.
TEST(FaultTolerantRuns, ZeroOneShardLostWithItsBuddyIsANamedError) {
  const auto r = run_process(ddprun_train({"--nproc-per-node", "4"},
                                          {"--zero", "1", "--ft-fault", "slot=1,step=3,phase=forward;slot=2,step=3,phase=forward"}),
                             with_timeout(60));
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("the rank that owned it and its buddy were both lost"), std::string::npos) << r.err;
}

TEST(FaultTolerantRuns, BelowMinRanksEveryRankStopsNamingTheLostRanks) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_process(ddprun_train({"--nproc-per-node", "3", "--min-ranks", "2"},
                                          {"--ft-fault", "slot=1,step=3,phase=forward;slot=2,step=3,phase=forward"}),
                             with_timeout(60));
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("below --min-ranks 2 (ranks lost: 1, 2)"), std::string::npos) << r.err;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
}

TEST(FaultTolerantRuns, ASlowRankThatStillBeatsIsNotThrownOut) {
  const std::string dir = fresh_dir("slow");
  // Rank 1 sleeps 3 x the 0.5 s heartbeat deadline inside a step: its heartbeat thread goes on beating.
  const auto r = run_process(ddprun_train({"--nproc-per-node", "2", "--heartbeat-timeout", "0.5"},
                                          {"--ft-log", dir, "--ft-fault", "slot=1,step=3,phase=stall"}),
                             with_timeout(60));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("stalls for 1500 ms"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("membership epoch 1"), std::string::npos) << r.err;
  EXPECT_EQ(check(dir).exit_code, 0);
}

TEST(FaultTolerantRuns, AWorkerThatCannotReachTheStoreSaysWhereItLooked) {
  ProcessOptions po = with_timeout(30);
  po.set_env = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "9"}, {"DDP_STORE", "agent"},
                {"DDP_FT_SLOT", "1"}, {"DDP_FT_INCARNATION", "1"}, {"DDP_FT_HEARTBEAT_TIMEOUT_MS", "300"}};
  std::vector<std::string> argv = {train_path(), "--fault-tolerant"};
  argv.insert(argv.end(), kModel.begin(), kModel.end());
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_process(argv, po);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("cannot reach ddprun's store at 127.0.0.1:9"), std::string::npos) << r.err;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 15.0);
}

TEST(FaultTolerantRuns, RefusalsNameTheFlagAndTheFix) {
  // Not under ddprun --fault-tolerant: the store would be rank 0's.
  std::vector<std::string> alone = {train_path(), "--fault-tolerant"};
  alone.insert(alone.end(), kModel.begin(), kModel.end());
  auto r = run_process(alone, with_timeout(30));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("ddprun --fault-tolerant --nproc-per-node N train --fault-tolerant"), std::string::npos) << r.err;
  r = run_process(ddprun_train({"--nproc-per-node", "2"}, {"--zero", "2"}), with_timeout(30));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--fault-tolerant does not take --zero 2/3"), std::string::npos) << r.err;
  r = run_process({testing::ddprun_path(), "--replacements", "1", train_path()}, with_timeout(30));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("belong to --fault-tolerant"), std::string::npos) << r.err;
  r = run_process({testing::ddprun_path(), "--fault-tolerant", "--max-restarts", "1", train_path()}, with_timeout(30));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("use one of them"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ddp

namespace ddp {
namespace {

// A fault-tolerant run stopped after 10 steps (its checkpoint) and resumed to 20 ends bitwise equal to one
// that ran the 20 steps at once; plain train refuses that checkpoint by name (its data position differs).
TEST(FaultTolerantRuns, ResumeFromItsCheckpointEqualsTheUninterruptedRun) {
  const std::string base = fresh_dir("resume");
  auto run = [&](const std::string& name, const std::string& steps, bool resume) {
    std::vector<std::string> extra = {"--ft-log", base + "/" + name, "--checkpoint-dir", base + "/ckpt_" + name,
                                      "--checkpoint-interval", "5", "--epochs", "0", "--steps", steps,
                                      // the schedule's length is --steps: constant, so 10 + 10 == 20
                                      "--schedule", "constant", "--warmup-steps", "0"};
    if (resume) {
      extra.push_back("--resume");
      extra.push_back("auto");
    }
    return run_process(ddprun_train({"--nproc-per-node", "2"}, extra), with_timeout(60));
  };
  auto r = run("whole", "20", false);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run("split", "10", false);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run("split", "20", true);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string whole = read(base + "/whole/final.slot0.inc0.bin");
  ASSERT_FALSE(whole.empty());
  EXPECT_TRUE(whole == read(base + "/split/final.slot0.inc0.bin")) << "the resumed run differs from the uninterrupted one";
  EXPECT_TRUE(whole == read(base + "/split/final.slot1.inc0.bin")) << "the resumed ranks differ";
  std::vector<std::string> plain = {train_path(), "--resume", "auto", "--checkpoint-dir", base + "/ckpt_split"};
  plain.insert(plain.end(), kModel.begin(), kModel.end());
  const auto p = run_process(plain, with_timeout(30));
  EXPECT_NE(p.exit_code, 0);
  EXPECT_NE(p.err.find("was written by train --fault-tolerant"), std::string::npos) << p.err;
}

}  // namespace
}  // namespace ddp

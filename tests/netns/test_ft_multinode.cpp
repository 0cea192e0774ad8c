// test_ft_multinode.cpp - fault-tolerant training across two "hosts" (docs/fault-tolerance.md): two network
// namespaces joined by a veth pair (namespace_pair.h), `ddprun --fault-tolerant --nnodes 2 --nproc-per-node 2`
// in each (node 0's ddprun hosts the store and the coordinator), `train --fault-tolerant` on the hierarchical
// CPU group. Case 1: both ranks of node 1 die (SIGKILL); node 1's ddprun reports their ends through the
// store and node 0's ranks go on as a world of 2. Case 2: node 1's link is cut mid-run; node 0's coordinator
// loses node 1's ranks by their silent heartbeats, node 0's ranks abort the collective that waits on them and
// go on; node 1's ranks lose the coordinator and stop with an error naming it. In both, node 0 finishes and
// `train --ft-check` holds. Skips where namespaces are not allowed.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <random>
#include <regex>

#include "tests/netns/namespace_pair.h"
#include "tests/support/run_process.h"

namespace ddp::testing {
namespace {

const std::vector<std::string> kModel = {"--model", "mlp", "--hidden", "32", "--depth", "1", "--data", "synthetic",
                                         "--synthetic-samples", "960", "--batch-size", "8", "--steps", "0",
                                         "--epochs", "2", "--optimizer", "sgd", "--momentum", "0.9", "--dtype",
                                         "float64", "--log-interval", "1"};

std::string token() {
  std::random_device rd;
  std::string hex;
  for (int i = 0; i < 32; ++i) hex += "0123456789abcdef"[rd() % 16];
  return hex;
}

class FtMultiNode : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why_not;
    pair_ = NamespacePair::create(&why_not);
    if (!pair_) GTEST_SKIP() << "network namespaces are not available here: " << why_not;
    dir_ = ::testing::TempDir() + "ft_netns_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
  }
  std::vector<std::string> node_command(int node, const std::string& tok, const std::string& fault) const {
    std::vector<std::string> cmd = {"/usr/bin/env",       "-u", "GLOO_SOCKET_IFNAME", "DDP_RUN_TOKEN=" + tok,
                                    "DDP_FT_TEST_STEP_SLEEP_MS=30", "DDP_COLLECTIVE_TIMEOUT_S=60",
                                    ddprun_path(), "--fault-tolerant", "--heartbeat-timeout", "1", "--nnodes", "2",
                                    "--node-rank", std::to_string(node), "--nproc-per-node", "2", "--master-addr",
                                    pair_->node(0).address, "--master-port", "29531",
                                    std::string(DDP_BIN_DIR) + "/train", "--fault-tolerant", "--ft-log", dir_};
    if (!fault.empty()) {
      cmd.push_back("--ft-fault");
      cmd.push_back(fault);
    }
    cmd.insert(cmd.end(), kModel.begin(), kModel.end());
    return pair_->exec_in(node, cmd);
  }
  ProcessResult check() const {
    std::vector<std::string> argv = {std::string(DDP_BIN_DIR) + "/train"};
    argv.insert(argv.end(), kModel.begin(), kModel.end());
    argv.push_back("--ft-check");
    argv.push_back(dir_);
    ProcessOptions o;
    o.timeout_s = 60;
    return run_process(argv, o);
  }
  std::unique_ptr<NamespacePair> pair_;
  std::string dir_;
};

std::string both(const ProcessResult& a, const ProcessResult& b) {
  return "--- node 0 exit " + std::to_string(a.exit_code) + "\n" + a.out + a.err + "--- node 1 exit " +
         std::to_string(b.exit_code) + "\n" + b.out + b.err;
}

TEST_F(FtMultiNode, OneHostsRanksKilledTheOtherHostGoesOn) {
  const std::string tok = token();
  ProcessOptions o;
  o.timeout_s = 90;
  auto n1 = std::async(std::launch::async, [&] {
    return run_process(node_command(1, tok, "slot=2,step=5,phase=backward;slot=3,step=5,phase=forward"), o);
  });
  const auto r0 = run_process(node_command(0, tok, ""), o);
  const auto r1 = n1.get();
  ASSERT_EQ(r0.exit_code, 0) << both(r0, r1);
  EXPECT_NE(r1.exit_code, 0) << both(r0, r1);  // node 1's part of the job failed
  EXPECT_TRUE(std::regex_search(r0.err, std::regex("rank [23] lost \\(SIGKILL \\(signal 9\\)\\)"))) << both(r0, r1);
  EXPECT_NE(r0.out.find("over world 2"), std::string::npos) << both(r0, r1);
  const auto c = check();
  EXPECT_EQ(c.exit_code, 0) << c.out << both(r0, r1);
}

TEST_F(FtMultiNode, OneHostsLinkCutTheOtherHostGoesOnAndTheCutOffRanksNameTheCoordinator) {
  const std::string tok = token();
  std::atomic<bool> cut{false};
  ProcessOptions o0;
  o0.timeout_s = 90;
  o0.on_progress = [&](pid_t, const std::string& out, const std::string&) {
    if (!cut && out.find("[rank 0] step     8 ") != std::string::npos) {
      cut = true;
      ProcessOptions quick;
      quick.timeout_s = 10;
      run_process(pair_->exec_in(1, {"ip", "link", "set", pair_->node(1).iface, "down"}), quick);
    }
  };
  ProcessOptions o1;
  o1.timeout_s = 90;
  auto n1 = std::async(std::launch::async, [&] { return run_process(node_command(1, tok, ""), o1); });
  const auto r0 = run_process(node_command(0, tok, ""), o0);
  const auto r1 = n1.get();
  ASSERT_TRUE(cut.load()) << both(r0, r1);
  ASSERT_EQ(r0.exit_code, 0) << both(r0, r1);
  EXPECT_NE(r0.err.find("(no heartbeat for "), std::string::npos) << both(r0, r1);
  EXPECT_NE(r0.out.find("over world 2"), std::string::npos) << both(r0, r1);
  EXPECT_NE(r1.exit_code, 0) << both(r0, r1);
  EXPECT_NE(r1.err.find("fault-tolerance coordinator"), std::string::npos) << both(r0, r1);
  const auto c = check();
  EXPECT_EQ(c.exit_code, 0) << c.out << both(r0, r1);
}

}  // namespace
}  // namespace ddp::testing

// test_multinode.cpp - ddprun across two "machines": two network namespaces joined by a veth pair, one
// `ddprun --nnodes 2 --nproc-per-node 2` in each, and tests/progs/dist_worker.cpp as the program (an
// all-reduce and an all-gather over all 4 ranks), on Gloo and on the hierarchical shm+Gloo group. Skips,
// with the reason, where namespaces are not allowed.
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <random>
#include <set>
#include <sstream>

#include "tests/support/run_process.h"
#include "tests/netns/namespace_pair.h"

namespace ddp::testing {
namespace {

constexpr int kNodes = 2;
constexpr int kProcsPerNode = 2;
constexpr double kNodeTimeoutS = 60;  // hard limit per ddprun; a healthy run takes well under a second

std::string random_token() {
  std::random_device rd;
  std::string hex;
  for (int i = 0; i < 32; ++i) hex += "0123456789abcdef"[rd() % 16];
  return hex;
}

struct NodeRun {
  std::string token;             // DDP_RUN_TOKEN of this node
  std::vector<std::string> env;  // more NAME=VALUE for this node's ddprun
  std::string backend = "gloo";  // dist_worker's backend argument
};

// Starts both nodes' ddprun at once and waits for both. The environment is given through `env` inside the
// namespace (the fork in run_process then does nothing but exec, which is safe with two threads forking).
std::vector<ProcessResult> run_nodes(const NamespacePair& pair, const std::vector<NodeRun>& runs) {
  std::vector<std::future<ProcessResult>> futures;
  for (int node = 0; node < kNodes; ++node) {
    std::vector<std::string> cmd = {"/usr/bin/env", "-u", "GLOO_SOCKET_IFNAME"};
    cmd.push_back("DDP_RUN_TOKEN=" + runs[node].token);
    cmd.insert(cmd.end(), runs[node].env.begin(), runs[node].env.end());
    const std::vector<std::string> ddprun = {ddprun_path(),
                                             "--nnodes",
                                             std::to_string(kNodes),
                                             "--node-rank",
                                             std::to_string(node),
                                             "--nproc-per-node",
                                             std::to_string(kProcsPerNode),
                                             "--master-addr",
                                             pair.node(0).address,
                                             "--master-port",
                                             "29500",
                                             std::string(DDP_BIN_DIR) + "/testprog_dist_worker",
                                             runs[node].backend};
    cmd.insert(cmd.end(), ddprun.begin(), ddprun.end());
    ProcessOptions opt;
    opt.timeout_s = kNodeTimeoutS;
    futures.push_back(std::async(std::launch::async,
                                 [argv = pair.exec_in(node, cmd), opt] { return run_process(argv, opt); }));
  }
  std::vector<ProcessResult> results;
  for (auto& f : futures) results.push_back(f.get());
  return results;
}

std::string describe(const std::vector<ProcessResult>& results) {
  std::string s;
  for (size_t i = 0; i < results.size(); ++i)
    s += "--- node " + std::to_string(i) + ": exit " + std::to_string(results[i].exit_code) +
         (results[i].timed_out ? " (timed out)" : "") + "\nstdout:\n" + results[i].out + "stderr:\n" +
         results[i].err;
  return s;
}

// Ranks whose worker reported "rank R of W (...): sum S ok" with the expected world size and sum.
std::set<int> ranks_with_right_sum(const std::string& out, int world, long long want_sum) {
  std::set<int> ranks;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    int prefix_rank = -1, rank = -1, size = -1, used = 0;
    long long sum = -1;
    char launcher[64] = {0};
    if (std::sscanf(line.c_str(), "[rank %d] rank %d of %d (%63[^)]): sum %lld ok%n", &prefix_rank, &rank,
                    &size, launcher, &sum, &used) == 5 &&
        used == static_cast<int>(line.size()) && prefix_rank == rank && size == world && sum == want_sum)
      ranks.insert(rank);
  }
  return ranks;
}

class MultiNode : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why_not;
    pair_ = NamespacePair::create(&why_not);
    if (!pair_) GTEST_SKIP() << "network namespaces are not available here: " << why_not;
  }
  std::unique_ptr<NamespacePair> pair_;  // deleted (with the namespaces) after every test, failed or not
};

void expect_allreduce_over_four_ranks(const std::vector<ProcessResult>& results) {
  const int world = kNodes * kProcsPerNode;
  const long long want_sum = static_cast<long long>(world) * (world + 1) / 2;  // each rank adds rank + 1
  for (int node = 0; node < kNodes; ++node) {
    EXPECT_FALSE(results[node].timed_out) << describe(results);
    EXPECT_EQ(results[node].exit_code, 0) << describe(results);
    std::set<int> want;
    for (int l = 0; l < kProcsPerNode; ++l) want.insert(node * kProcsPerNode + l);
    EXPECT_EQ(ranks_with_right_sum(results[node].out, world, want_sum), want) << describe(results);
  }
}

// Gloo listens on the local address that routes to MASTER_ADDR: the veth address in each namespace.
TEST_F(MultiNode, AllreduceOverFourRanksOnTwoNodes) {
  const std::string token = random_token();
  auto results =
      run_nodes(*pair_, {{token, {"DDP_COLLECTIVE_TIMEOUT_S=20"}}, {token, {"DDP_COLLECTIVE_TIMEOUT_S=20"}}});
  expect_allreduce_over_four_ranks(results);
}

// The same with Gloo's interface named explicitly, as on a multi-homed host.
TEST_F(MultiNode, AllreduceWithGlooSocketIfname) {
  const std::string token = random_token();
  auto results = run_nodes(
      *pair_, {{token, {"DDP_COLLECTIVE_TIMEOUT_S=20", "GLOO_SOCKET_IFNAME=" + pair_->node(0).iface}},
               {token, {"DDP_COLLECTIVE_TIMEOUT_S=20", "GLOO_SOCKET_IFNAME=" + pair_->node(1).iface}}});
  expect_allreduce_over_four_ranks(results);
}

// The CPU default ("cpu"): the nodes are separate network namespaces, so separate hosts, and every rank gets
// the hierarchical group (shm between the two ranks of a node, Gloo between the node leaders).
TEST_F(MultiNode, CpuDefaultIsHierarchicalAcrossNodes) {
  const std::string token = random_token();
  NodeRun run{token, {"DDP_COLLECTIVE_TIMEOUT_S=20"}, "cpu"};
  auto results = run_nodes(*pair_, {run, run});
  expect_allreduce_over_four_ranks(results);
  for (int node = 0; node < kNodes; ++node) {
    size_t n = 0;
    for (size_t p = results[node].out.find("backend hier"); p != std::string::npos;
         p = results[node].out.find("backend hier", p + 1))
      ++n;
    EXPECT_EQ(n, static_cast<size_t>(kProcsPerNode)) << describe(results);
  }
}

// Node 1 has another token: its ranks are refused by the store on node 0 and say why; node 0 logs the refusal
// (the clients detect the wrong token from the server's proof) and gives up after its collective timeout
// instead of waiting forever.
TEST_F(MultiNode, WrongTokenOnOneNodeFailsBothWithTheReason) {
  auto results = run_nodes(*pair_, {{random_token(), {"DDP_COLLECTIVE_TIMEOUT_S=3"}},
                                    {random_token(), {"DDP_COLLECTIVE_TIMEOUT_S=3"}}});
  for (int node = 0; node < kNodes; ++node) {
    EXPECT_FALSE(results[node].timed_out) << describe(results);
    EXPECT_NE(results[node].exit_code, 0) << describe(results);
    EXPECT_NE((results[node].out + results[node].err).find("wrong run token"), std::string::npos)
        << describe(results);
  }
  EXPECT_NE(results[1].err.find("could not prove that it knows this run's token"), std::string::npos)
      << describe(results);
  EXPECT_NE(results[0].err.find("did not appear"), std::string::npos) << describe(results);
}

}  // namespace
}  // namespace ddp::testing

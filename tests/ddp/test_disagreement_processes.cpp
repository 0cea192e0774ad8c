// test_disagreement_processes.cpp - the disagreement case of test_disagreement.cpp with real processes under
// ddprun: rank 0 raises the unused-parameter error in the first step, catches it and keeps training; the run
// ends normally with the bucket rebuild done and both ranks' parameters identical (issue 10, defect 2).
#include <gtest/gtest.h>

#include <regex>

#include "tests/support/run_process.h"

using namespace ddp::testing;

TEST(DisagreementProcesses, RankThatCatchesTheUnusedParameterErrorKeepsTrainingWithTheOthers) {
  ProcessOptions po;
  po.timeout_s = 120;
  po.set_env["DDP_COLLECTIVE_TIMEOUT_S"] = "20";
  auto r = run_process({ddprun_path(), "--standalone", "--nproc-per-node", "2",
                        std::string(DDP_BIN_DIR) + "/testprog_ddp_disagree_worker"},
                       po);
  const std::string all = r.out + r.err;
  ASSERT_FALSE(r.timed_out) << all;
  EXPECT_EQ(r.exit_code, 0) << all;
  EXPECT_NE(all.find("[rank 0] caught: rank 0: DDP finished this backward but 2 parameter(s) received no "
                     "gradient"),
            std::string::npos)
      << all;
  EXPECT_EQ(all.find("[rank 1] caught"), std::string::npos) << all;
  std::smatch m0, m1;
  ASSERT_TRUE(std::regex_search(all, m0, std::regex(R"(\[rank 0\] rebuilt 1 params (\S+))"))) << all;
  ASSERT_TRUE(std::regex_search(all, m1, std::regex(R"(\[rank 1\] rebuilt 1 params (\S+))"))) << all;
  EXPECT_EQ(m0[1].str(), m1[1].str()) << "the replicas diverged: " << all;
}

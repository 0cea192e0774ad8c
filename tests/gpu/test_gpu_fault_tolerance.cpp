// test_gpu_fault_tolerance.cpp - fault-tolerant training on GPUs (docs/fault-tolerance.md): the NCCL group of
// each membership epoch, the abort of the one a lost rank leaves (ncclCommAbort), the healed state broadcast
// in device memory. Two ranks on this machine's GPUs (both on GPU 0 when there is one: NCCL refuses two ranks on
// one GPU, so then the group is Gloo staging device memory); rank 1 killed inside backward, replaced; the record
// checked against one process on the CPU (float64, 1e-9: cuBLAS adds in another order). Skips without a GPU.
#include <gtest/gtest.h>

#include <filesystem>

#include "runtime/core/device.h"
#include "tests/support/run_process.h"

namespace ddp {
namespace {

TEST(GpuFaultTolerance, KilledAndReplacedOnTheGpuEqualsOneProcess) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  const std::vector<std::string> model = {"--model", "mlp", "--hidden", "64", "--depth", "1", "--data", "synthetic",
                                          "--synthetic-samples", "384", "--batch-size", "8", "--steps", "0",
                                          "--epochs", "2", "--optimizer", "sgd", "--dtype", "float64",
                                          "--log-interval", "0"};
  const std::string dir = ::testing::TempDir() + "ft_gpu_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const std::string train = std::string(DDP_BIN_DIR) + "/train";
  std::vector<std::string> argv = {testing::ddprun_path(), "--fault-tolerant", "--standalone", "--nproc-per-node", "2",
                                   "--replacements", "1", train, "--fault-tolerant", "--device", "cuda",
                                   "--backend", cuda_device_count() >= 2 ? "nccl" : "gloo", "--ft-log", dir,
                                   "--ft-fault", "slot=1,step=4,phase=backward"};
  argv.insert(argv.end(), model.begin(), model.end());
  testing::ProcessOptions po;
  po.timeout_s = 120;
  po.set_env["DDP_FT_TEST_STEP_SLEEP_MS"] = "20";
  const auto r = testing::run_process(argv, po);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("rank 1 lost (SIGKILL (signal 9))"), std::string::npos) << r.err;
  std::vector<std::string> check = {train, "--ft-check", dir, "--ft-check-tolerance", "1e-9"};
  check.insert(check.end(), model.begin(), model.end());
  testing::ProcessOptions co;
  co.timeout_s = 60;
  const auto c = testing::run_process(check, co);
  EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
}

}  // namespace
}  // namespace ddp

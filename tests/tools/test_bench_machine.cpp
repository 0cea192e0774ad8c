// test_bench_machine.cpp - `bench_machine`, the header of `tools/ddp bench` (tools/bench.sh) and of
// tools/bench_ddp_step.sh: it names the CPU, lists the ISA flags that decide the kernels, the Highway target the
// kernels run with (the one this process's dispatcher picks), the BLAS libraries with OpenBLAS's kernel and the
// environment's OPENBLAS_CORETYPE, the threads, and - unless --no-probe - the measured FMA peak and copy
// bandwidth.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "kernels/cpu/simd_target.h"
#include "tests/support/run_process.h"

namespace {
ddp::testing::ProcessResult machine(const std::vector<std::string>& args, const std::string& coretype) {
  std::vector<std::string> argv = {std::string(DDP_BIN_DIR) + "/bench_machine"};
  argv.insert(argv.end(), args.begin(), args.end());
  ddp::testing::ProcessOptions o;
  o.unset_env = {"OPENBLAS_CORETYPE"};
  if (!coretype.empty()) o.set_env = {{"OPENBLAS_CORETYPE", coretype}};
  o.timeout_s = 60;
  return ddp::testing::run_process(argv, o);
}
}  // namespace

TEST(BenchMachine, NamesTheCpuIsaSimdTargetBlasKernelAndThreadsThenTheMeasuredPeaks) {
  if (!std::filesystem::exists(std::string(DDP_BIN_DIR) + "/bench_machine"))
    GTEST_SKIP() << "bin/bench_machine not built (DDP_BUILD_BENCH=OFF)";
  auto r = machine({"--no-probe"}, "");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("machine: ", 0), 0u) << r.out;
  for (const char* flag : {"avx2", "fma", "avx512f"}) EXPECT_NE(r.out.find(flag), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::string("CPU kernels: ") + ddp::kernels::cpu::simd_target_name()), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("OpenBLAS kernel "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("OPENBLAS_CORETYPE=unset"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("threads: OpenBLAS "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FMA peak"), std::string::npos) << "--no-probe measures nothing\n" << r.out;

  r = machine({}, "Prescott");  // every x86-64 CPU runs OpenBLAS's Prescott kernels
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("OpenBLAS kernel Prescott (OPENBLAS_CORETYPE=Prescott"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("one core: float32 FMA peak "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" GB/s (256 MiB memcpy"), std::string::npos) << r.out;
}

// test_bench_machine.cpp - `bench_machine`, the header of `tools/ddp bench` (tools/bench.sh) and of
// tools/bench_ddp_step.sh: it names the CPU, lists the ISA flags that decide the kernels, the Highway target the
// kernels run with (the one this process's dispatcher picks), the BLAS libraries with OpenBLAS's kernel and the
// environment's OPENBLAS_CORETYPE, the threads, and - unless --no-probe - the measured FMA peak and copy
// bandwidth.
#include <gtest/gtest.h>
#include <sched.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "kernels/cpu/core_round_trip.h"
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
  EXPECT_NE(r.out.find("a cache line's round trip "), std::string::npos) << r.out;

  r = machine({"--round-trip-only"}, "");  // between benchmark runs: that line alone
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("machine: "), std::string::npos) << r.out;
  EXPECT_TRUE(r.out.find("a cache line's round trip ") != std::string::npos ||
              r.out.find("round trip not measured") != std::string::npos)
      << r.out;
}

// The round trip between two CPUs: positive with two CPUs allowed; -1 (not a hang) with one.
TEST(BenchMachine, CoreRoundTripIsMeasuredBetweenTwoCpusAndRefusedOnOne) {
  int a = -1, b = -1;
  ddp::kernels::cpu::round_trip_cpus(&a, &b);
  if (b < 0) GTEST_SKIP() << "this process may run on one CPU only";
  EXPECT_NE(a, b);
  const double ns = ddp::kernels::cpu::measure_core_round_trip_ns(2000, 1, 0.2);
  EXPECT_GT(ns, 0);
  EXPECT_LT(ns, 1e7) << "a round trip of 10 ms measures the scheduler";

  cpu_set_t saved, one;  // this thread on one CPU: the probe sees one CPU allowed
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  CPU_ZERO(&one);
  CPU_SET(a, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  ddp::kernels::cpu::round_trip_cpus(&a, &b);
  const double refused = ddp::kernels::cpu::measure_core_round_trip_ns(2000, 1, 0.2);
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(b, -1);
  EXPECT_EQ(refused, -1);
}

// DDP_CPU_ISA caps the instruction set the CPU kernels are dispatched to (the AVX2 code of an AVX2-only
// machine, run on one that has AVX-512); an unknown value is named with the choices at load and not applied,
// and bench_machine refuses to run under it.
TEST(BenchMachine, DdpCpuIsaCapsTheKernelsInstructionSetAndRefusesUnknownValuesByName) {
  using ddp::kernels::cpu::simd_targets_above;
  EXPECT_EQ(simd_targets_above(""), 0);
  EXPECT_EQ(simd_targets_above("best"), 0);
  EXPECT_EQ(simd_targets_above("AVX512"), simd_targets_above("avx3"));
  const int64_t above_avx2 = simd_targets_above("avx2");
  EXPECT_NE(above_avx2, 0);
  EXPECT_EQ(above_avx2 & ~simd_targets_above("sse4"), 0) << "avx2 rules out a subset of what sse4 does";
  EXPECT_NE(above_avx2, simd_targets_above("sse4"));
  EXPECT_EQ(above_avx2 & simd_targets_above("avx3"), simd_targets_above("avx3"));
  try {
    simd_targets_above("sse9");
    ADD_FAILURE() << "an unknown instruction set was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("DDP_CPU_ISA='sse9'"), std::string::npos) << what;
    EXPECT_NE(what.find("avx2"), std::string::npos) << what;
  }

  if (!std::filesystem::exists(std::string(DDP_BIN_DIR) + "/bench_machine"))
    GTEST_SKIP() << "bin/bench_machine not built (DDP_BUILD_BENCH=OFF)";
  auto run = [](const std::string& isa) {
    ddp::testing::ProcessOptions o;
    o.unset_env = {"OPENBLAS_CORETYPE", "ONEDNN_MAX_CPU_ISA"};
    o.set_env = {{"DDP_CPU_ISA", isa}};
    o.timeout_s = 60;
    return ddp::testing::run_process({std::string(DDP_BIN_DIR) + "/bench_machine", "--no-probe"}, o);
  };
  auto r = run("sse9");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("ddp.cpp: warning: DDP_CPU_ISA='sse9' is not an instruction set"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("bench_machine: DDP_CPU_ISA='sse9'"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("machine: "), std::string::npos) << "no figures under a cap not applied\n" << r.out;
  EXPECT_EQ(ddp::kernels::cpu::simd_isa_cap_error(), "") << "this test process has no DDP_CPU_ISA";

  // Any other program goes on, uncapped, after the warning (a Python session that loaded the library must not
  // die on it).
  if (std::filesystem::exists(std::string(DDP_BIN_DIR) + "/bench_e2e")) {
    ddp::testing::ProcessOptions o;
    o.set_env = {{"DDP_CPU_ISA", "sse9"}};
    o.timeout_s = 120;
    auto e2e = ddp::testing::run_process({std::string(DDP_BIN_DIR) + "/bench_e2e", "--config", "mlp",
                                          "--steps", "2", "--warmup", "1", "--mode", "nosync"},
                                         o);
    EXPECT_EQ(e2e.exit_code, 0) << e2e.out << e2e.err;
    EXPECT_NE(e2e.err.find("ddp.cpp: warning: DDP_CPU_ISA='sse9'"), std::string::npos) << e2e.err;
  }

  const std::string best = ddp::kernels::cpu::simd_target_name();
  if (best != "AVX3" && best != "AVX3_DL" && best != "AVX2")
    GTEST_SKIP() << "this CPU's kernels run " << best;
  r = run("avx2");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("CPU kernels: AVX2 (Highway run-time choice, capped by DDP_CPU_ISA=avx2)"),
            std::string::npos)
      << r.out;
  bool openblas_avx512 =
      false;  // OpenBLAS picked its kernels before the cap was read: the cap cannot reach them
  for (const char* core : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    openblas_avx512 =
        openblas_avx512 || r.out.find(std::string("OpenBLAS kernel ") + core) != std::string::npos;
  EXPECT_EQ(r.out.find("set OPENBLAS_CORETYPE=Haswell too") != std::string::npos, openblas_avx512) << r.out;
}

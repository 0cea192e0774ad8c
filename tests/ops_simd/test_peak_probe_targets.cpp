// test_peak_probe_targets.cpp - the machine's yardsticks (kernels/cpu/peak_probe.h) on every Highway target
// this CPU supports: the FMA loop's FLOPs per round follow the target's vector width (2 FLOPs x 12
// accumulators x lanes), its result is finite and depends on the work (each accumulator tends to 1, so the sum
// tends to 12 x lanes), and the timed measurements return positive figures. The values themselves are the
// benchmarks' (bench_micro_ops Peak_Fma / Peak_Copy, bench_machine), not a test's.
#include <gtest/gtest.h>

#include <cmath>

#include "hwy/highway.h"
#include "kernels/cpu/peak_probe.h"
#include "tests/ops_simd/simd_test_util.h"

namespace cpu = ddp::kernels::cpu;

TEST(PeakProbe, FmaLoopCountsItsFlopsPerTargetAndMeasurementsArePositive) {
  ddp::testing::for_each_simd_target([](const std::string& target) {
    const int64_t flops = cpu::fma_peak_flops_per_iteration();
    ASSERT_GT(flops, 0) << target;
    ASSERT_EQ(flops % 24, 0) << target << ": 2 FLOPs x 12 accumulators x lanes";
    const double lanes = static_cast<double>(flops / 24);
    const float converged = cpu::fma_peak_loop(20000);  // 0.999^20000 ~ 2e-9: every accumulator ~1
    EXPECT_NEAR(converged, 12 * lanes, 1e-3 * 12 * lanes) << target;
    const float early = cpu::fma_peak_loop(1);  // a0..a11 start at 0 .. 1.2: one round moves them a little
    EXPECT_TRUE(std::isfinite(early)) << target;
    EXPECT_NE(early, converged) << target << ": the result must depend on the number of rounds";
    EXPECT_GT(cpu::measure_fma_peak_gflops(0.01), 0) << target;
  });
  EXPECT_GT(cpu::measure_copy_gbps(1 << 20, 0.005), 0);
}

// peak_probe.h - what one core of this machine can do at most, measured: the float32 FMA peak (an unrolled
// loop of independent multiply-adds in registers, at the instruction set Highway picks at run time, the widest
// the CPU and the build share) and the copy bandwidth (a large memcpy, out of the caches). The yardsticks of
// bench_micro_ops (Peak_Fma, Peak_Copy) and of bench_machine's header (docs/benchmarks.md, "The machine").
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {
// Runs `iterations` rounds of the FMA loop on the calling thread; returns a value that depends on every
// multiply-add (so that none is optimized away). Each round is fma_peak_flops_per_iteration() FLOPs.
float fma_peak_loop(int64_t iterations);
// FLOPs of one round at the current instruction set (2 per lane per multiply-add).
int64_t fma_peak_flops_per_iteration();
// Seconds-long measurements (each about `seconds`): GFLOP/s of fma_peak_loop on this thread, and GB/s of a
// memcpy of `bytes` (read + written bytes per second, as bench_micro_ops' copy_GBps). Best of a few runs.
double measure_fma_peak_gflops(double seconds = 0.2);
double measure_copy_gbps(int64_t bytes = int64_t{256} << 20, double seconds = 0.3);
}  // namespace ddp::kernels::cpu

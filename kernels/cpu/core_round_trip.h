// core_round_trip.h - how far apart two of this machine's cores are, measured: the time for a cache line to
// go from one core to another and back (two threads pinned one per core, passing a counter back and forth).
// On the 2-vCPU development VMs it is ~80 ns when the host runs both vCPUs on cores that share a last-level
// cache and ~380 ns when it runs them on cores that do not, and the host switches between the two placements
// while a benchmark runs: the default gpt's 2-thread step (small GEMMs whose packed panels OpenBLAS's two
// threads share) is ~1.45x faster than one thread in the first case and no faster in the second; a 1024^3
// sgemm on 2 threads loses ~15% (docs/benchmarks.md, "The machine"). bench_machine prints it beside the
// peaks.
#pragma once

namespace ddp::kernels::cpu {
// The round trip in nanoseconds between the first two CPUs this process may run on (sched_getaffinity),
// the best of `repeats` measurements of `rounds` round trips each; -1 when it cannot be measured (fewer than
// two CPUs allowed, or a thread could not be pinned: two threads spinning on one CPU would measure the
// scheduler, not the caches). A measurement stops after about `max_seconds` whatever its rounds.
double measure_core_round_trip_ns(int rounds = 20000, int repeats = 3, double max_seconds = 0.5);
// The two CPUs it measures (-1, -1 when fewer than two are allowed).
void round_trip_cpus(int* first, int* second);
}  // namespace ddp::kernels::cpu

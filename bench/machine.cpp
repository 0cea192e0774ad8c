// machine.cpp - bench_machine: the machine a benchmark ran on, printed first by `tools/ddp bench`
// (tools/bench.sh) and tools/bench_ddp_step.sh, so that every table names its CPU: the CPU model and core
// count, the ISA flags that decide the kernels (avx2, fma, avx512f/bw/vl/dq, avx512_bf16, amx), the Highway
// target the CPU kernels run with (chosen at run time), the BLAS libraries and OpenBLAS's kernel (its core
// type, the environment's OPENBLAS_CORETYPE, its build config), the thread settings, and - unless --no-probe
// - the measured single-core float32 FMA peak and copy bandwidth (kernels/cpu/peak_probe.h; about half a
// second) and the round trip of a cache line between the first two CPUs (kernels/cpu/core_round_trip.h:
// whether they share a cache). The kernels' instruction set can be capped with DDP_CPU_ISA
// (kernels/cpu/simd_target.h).
//   bin/bench_machine [--no-probe | --round-trip-only]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/core_round_trip.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_backend.h"
#include "kernels/cpu/peak_probe.h"
#include "kernels/cpu/simd_target.h"

namespace {
// The value of the first /proc/cpuinfo line that starts with `key` ("" when there is none).
std::string cpuinfo(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) {
      const auto c = line.find(':');
      return c == std::string::npos ? "" : line.substr(c + 2);
    }
  return "";
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app("The machine a benchmark runs on: CPU, ISA, SIMD target, BLAS kernel, threads, measured peaks.");
  bool no_probe = false;
  app.add_flag("--no-probe", no_probe,
               "do not measure the FMA peak, the copy bandwidth and the CPUs' round trip");
  bool round_trip_only = false;
  app.add_flag(
      "--round-trip-only", round_trip_only,
      "print only the first two CPUs' cache-line round trip (a few milliseconds: between benchmark runs)");
  CLI11_PARSE(app, argc, argv);
  namespace cpu = ddp::kernels::cpu;
  // An unknown DDP_CPU_ISA: the library said why at load; no figure under a cap that was not applied.
  if (!cpu::simd_isa_cap_error().empty()) {
    std::fprintf(stderr, "bench_machine: %s\n", cpu::simd_isa_cap_error().c_str());
    return 2;
  }
  auto print_round_trip = [&] {
    int first = -1, second = -1;
    cpu::round_trip_cpus(&first, &second);
    const double round_trip = cpu::measure_core_round_trip_ns();
    if (round_trip > 0)
      std::printf(
          "  CPUs %d and %d: a cache line's round trip %.0f ns (under ~150: they share a cache; several "
          "hundred: they do not, and a 2-thread rank's small GEMMs gain little from the second thread - on a "
          "VM the host can change this during a run; docs/benchmarks.md, \"The machine\")\n",
          first, second, round_trip);
    else
      std::printf("  CPUs: round trip not measured (%s)\n",
                  first < 0 ? "fewer than two CPUs allowed" : "a thread could not be pinned");
  };
  if (round_trip_only) {
    print_round_trip();
    return 0;
  }

  const std::string model = cpuinfo("model name");
  std::istringstream flags_in(cpuinfo("flags"));
  std::vector<std::string> flags;
  for (std::string f; flags_in >> f;) flags.push_back(f);
  auto has = [&](const char* f) { return std::find(flags.begin(), flags.end(), f) != flags.end(); };
  std::string isa;
  for (const char* f : {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "amx_tile"})
    isa += std::string(isa.empty() ? "" : " ") + f + (has(f) ? "" : "=no");
  const unsigned cores = std::thread::hardware_concurrency();
  std::printf("machine: %s, %u hardware threads\n", model.empty() ? "unknown CPU" : model.c_str(), cores);
  std::printf("  ISA: %s\n", isa.c_str());
  if (cpu::simd_isa_cap().empty())
    std::printf("  CPU kernels: %s (Highway run-time choice)\n", cpu::simd_target_name());
  else
    std::printf("  CPU kernels: %s (Highway run-time choice, capped by DDP_CPU_ISA=%s)\n",
                cpu::simd_target_name(), cpu::simd_isa_cap().c_str());
  std::printf("  BLAS: %s; OpenBLAS kernel %s\n", cpu::gemm_libraries().c_str(), cpu::openblas_kernel().c_str());
  // OpenBLAS 0.3.21 detects neither this project's AMD EPYC guests nor recent Xeons, and the environment may
  // pin a core type below what the CPU runs: say so, since every GEMM-bound figure follows it.
  {
    const std::string kernel = cpu::openblas_kernel();
    const std::string core = kernel.substr(0, kernel.find(' '));
    const bool avx512 = has("avx512bw") && has("avx512vl") && has("avx512dq");
    const bool avx512_core = core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
    const bool avx2_core = avx512_core || core == "Haswell" || core == "Zen";
    const char* better = avx512 && !avx512_core ? "SkylakeX" : (has("avx2") && !avx2_core ? "Haswell" : nullptr);
    const bool capped_below_avx512 = cpu::simd_isa_cap_below_avx512();
    if (capped_below_avx512 && avx512_core)
      std::printf(
          "  note: DDP_CPU_ISA=%s caps the CPU kernels below AVX-512 but OpenBLAS runs %s kernels: set "
          "OPENBLAS_CORETYPE=Haswell too (tools/bench.sh does with BENCH_ISA)\n",
          cpu::simd_isa_cap().c_str(), core.c_str());
    if (better && !capped_below_avx512)
      std::printf("  note: OpenBLAS runs %s kernels on a CPU that runs %s ones: OPENBLAS_CORETYPE=%s (tools/ddp sets it "
                  "when the environment has not; on the AVX-512 machine of docs/benchmarks.md Haswell kernels made "
                  "its 2-thread steps 1.5-2.3x slower)\n",
                  core.c_str(), better, better);
  }
  std::printf("  threads: OpenBLAS %d, OMP_NUM_THREADS=%s, OPENBLAS_NUM_THREADS=%s\n", cpu::blas_threads(),
              env_or("OMP_NUM_THREADS", "unset").c_str(), env_or("OPENBLAS_NUM_THREADS", "unset").c_str());
  double fma = 0, copy = 0;
  if (!no_probe) {
    fma = cpu::measure_fma_peak_gflops();
    copy = cpu::measure_copy_gbps();
    std::printf("  one core: float32 FMA peak %.1f GFLOP/s (%s), copy %.1f GB/s (256 MiB memcpy, read + write)\n",
                fma, cpu::simd_target_name(), copy);
    print_round_trip();
  }
  return 0;
}

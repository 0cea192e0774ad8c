// machine.cpp - bench_machine: the machine a benchmark ran on, printed first by `tools/ddp bench` (tools/bench.sh)
// and tools/bench_ddp_step.sh, so that every table names its CPU: the CPU model and core count, the ISA flags
// that decide the kernels (avx2, fma, avx512f/bw/vl/dq, avx512_bf16, amx), the Highway target the CPU kernels
// run with (chosen at run time), the BLAS libraries and OpenBLAS's kernel (its core type, the environment's
// OPENBLAS_CORETYPE, its build config), the thread settings, and - unless --no-probe - the measured single-core
// float32 FMA peak and copy bandwidth (kernels/cpu/peak_probe.h; about half a second).
//   bin/bench_machine [--no-probe]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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
  app.add_flag("--no-probe", no_probe, "do not measure the FMA peak and the copy bandwidth");
  CLI11_PARSE(app, argc, argv);
  namespace cpu = ddp::kernels::cpu;

  const std::string model = cpuinfo("model name");
  std::istringstream flags_in(cpuinfo("flags"));
  std::vector<std::string> flags;
  for (std::string f; flags_in >> f;) flags.push_back(f);
  std::string isa;
  for (const char* f : {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "amx_tile"}) {
    bool has = false;
    for (const std::string& g : flags) has = has || g == f;
    isa += std::string(isa.empty() ? "" : " ") + f + (has ? "" : "=no");
  }
  const unsigned cores = std::thread::hardware_concurrency();
  std::printf("machine: %s, %u hardware threads\n", model.empty() ? "unknown CPU" : model.c_str(), cores);
  std::printf("  ISA: %s\n", isa.c_str());
  std::printf("  CPU kernels: %s (Highway run-time choice)\n", cpu::simd_target_name());
  std::printf("  BLAS: %s; OpenBLAS kernel %s\n", cpu::gemm_libraries().c_str(), cpu::openblas_kernel().c_str());
  std::printf("  threads: OpenBLAS %d, OMP_NUM_THREADS=%s, OPENBLAS_NUM_THREADS=%s\n", cpu::blas_threads(),
              env_or("OMP_NUM_THREADS", "unset").c_str(), env_or("OPENBLAS_NUM_THREADS", "unset").c_str());
  double fma = 0, copy = 0;
  if (!no_probe) {
    fma = cpu::measure_fma_peak_gflops();
    copy = cpu::measure_copy_gbps();
    std::printf("  one core: float32 FMA peak %.1f GFLOP/s (%s), copy %.1f GB/s (256 MiB memcpy, read + write)\n",
                fma, cpu::simd_target_name(), copy);
  }
  return 0;
}

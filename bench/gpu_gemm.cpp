// gpu_gemm.cpp - GEMM throughput through the engine on the GPU: ops::matmul of (n, n) x (n, n), 2n^3 FLOPs
// per call, reported as TFLOP/s against --peak-tflops. --dtype f32: cuBLAS SGEMM (no TF32); --dtype bf16: the
// mixed precision path (runtime/ops/mixed_precision.h: operands converted to bf16, cuBLAS bf16 tensor-core
// GEMM with float32 accumulation, output rounded), conversions included. Default peaks: NVIDIA's H100/H200
// SXM datasheet (runtime/core/peak_flops.h), not measured. Without a GPU it parses its flags and prints
// "skipped".
#include <chrono>
#include <cstdio>
#include <string>

#include "runtime/autograd/node.h"
#include "runtime/core/cli.h"
#include "runtime/core/float32_math.h"
#include "runtime/core/peak_flops.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/mixed_precision.h"

int main(int argc, char** argv) {
  using namespace ddp;
  int64_t n = 4096;
  int reps = 20;
  double peak = 0;
  std::string dtype = "f32";
  cli::Parser p("bench_gpu_gemm", "GEMM TFLOP/s through ops::matmul on cuda:0");
  p.add("n", &n, "matrix size", cli::Bounds::at_least(1));
  p.add("reps", &reps, "timed calls", cli::Bounds::at_least(1));
  std::string precision = "highest";
  p.add_choice("dtype", &dtype, {"f32", "bf16"}, "f32: cuBLAS float32 GEMM; bf16: the mixed-precision matmul");
  p.add_choice("float32-matmul-precision", &precision, {"highest", "high"},
               "f32: highest (IEEE FMAs, PyTorch's default) or high (TF32 tensor cores)");
  p.add("peak-tflops", &peak, "the device's peak for this dtype (0: datasheet figure for H100/H200 SXM)");
  try {
    p.parse(argc, argv);
    if (cuda_device_count() == 0) {
      std::printf("bench_gpu_gemm: skipped: no GPU (%s)\n", cuda_unavailable_reason().c_str());
      return 0;
    }
    const bool bf16 = dtype == "bf16";
    set_float32_matmul_precision(precision);
    std::string source = "--peak-tflops";
    if (peak <= 0) {
      const PeakFlops pf = datasheet_peak(cuda_device_name(0), bf16, float32_gemm_may_use_tf32());
      peak = pf.tflops;
      source = pf.source;
    }
    autograd::NoGradGuard ng;
    ops::Bf16Compute mode(bf16);
    Tensor a = Tensor::randn({n, n}, 1).to(Device::cuda(0)), b = Tensor::randn({n, n}, 2).to(Device::cuda(0));
    for (int i = 0; i < 3; ++i) ops::matmul(a, b);
    device_synchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) ops::matmul(a, b);
    device_synchronize();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    double tflops = 2.0 * n * n * n / s / 1e12;
    if (peak > 0)
      std::printf("gemm %s %lld^3: %.3f ms, %.1f TFLOP/s (%.0f%% of %.0f: %s)\n", dtype.c_str(),
                  static_cast<long long>(n), s * 1e3, tflops, 100 * tflops / peak, peak, source.c_str());
    else
      std::printf("gemm %s %lld^3: %.3f ms, %.1f TFLOP/s (no peak known for %s)\n", dtype.c_str(),
                  static_cast<long long>(n), s * 1e3, tflops, cuda_device_name(0).c_str());
    return 0;
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_gemm: %s\n", e.what());
    return 1;
  }
}

// gpu_gemm.cpp - GEMM throughput through the engine on the GPU: ops::matmul of (n, n) x (n, n) float32
// (cuBLAS, no TF32), 2n^3 FLOPs per call, reported as TFLOP/s against --peak-tflops (H200 fp32: 67
// datasheet).
#include <chrono>
#include <cstdio>

#include "runtime/autograd/node.h"
#include "runtime/core/cli.h"
#include "runtime/ops/linalg.h"

int main(int argc, char** argv) {
  using namespace ddp;
  int64_t n = 4096;
  int reps = 20;
  double peak = 67.0;
  cli::Parser p("bench_gpu_gemm", "float32 GEMM TFLOP/s through ops::matmul on cuda:0");
  p.add("n", &n, "matrix size");
  p.add("reps", &reps, "timed calls");
  p.add("peak-tflops", &peak, "the device's float32 peak, for the ratio");
  try {
    p.parse(argc, argv);
    if (cuda_device_count() == 0) {
      std::printf("bench_gpu_gemm: skipped: no GPU (%s)\n", cuda_unavailable_reason().c_str());
      return 0;
    }
    autograd::NoGradGuard ng;
    Tensor a = Tensor::randn({n, n}, 1).to(Device::cuda(0)), b = Tensor::randn({n, n}, 2).to(Device::cuda(0));
    for (int i = 0; i < 3; ++i) ops::matmul(a, b);
    device_synchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) ops::matmul(a, b);
    device_synchronize();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    double tflops = 2.0 * n * n * n / s / 1e12;
    std::printf("gemm f32 %lldx%lldx%lld: %.3f ms, %.1f TFLOP/s (%.0f%% of %.0f)\n",
                static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(n), s * 1e3,
                tflops, 100 * tflops / peak, peak);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_gemm: %s\n", e.what());
    return 1;
  }
}

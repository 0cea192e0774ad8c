// peak_probe.cpp - the FMA loop of peak_probe.h per Highway target (12 independent accumulators: enough to
// cover the FMA latency times its throughput - 4 cycles x 2 ports = 8 on the cores measured - with registers to
// spare for AVX2's 16), dispatched at run time like the kernels; and the timed loops around it and memcpy.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/peak_probe.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"

#include "kernels/cpu/peak_probe.h"

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
constexpr int kAccumulators = 12;

// acc = acc * m + c converges to c / (1 - m) = 1: no overflow, no denormals, whatever the count.
float FmaPeakLoop(int64_t iterations) {
  const hn::ScalableTag<float> d;
  const auto m = hn::Set(d, 0.999f), c = hn::Set(d, 0.001f);
  auto a0 = hn::Set(d, 0.0f), a1 = hn::Set(d, 0.1f), a2 = hn::Set(d, 0.2f), a3 = hn::Set(d, 0.3f);
  auto a4 = hn::Set(d, 0.4f), a5 = hn::Set(d, 0.5f), a6 = hn::Set(d, 0.6f), a7 = hn::Set(d, 0.7f);
  auto a8 = hn::Set(d, 0.8f), a9 = hn::Set(d, 0.9f), a10 = hn::Set(d, 1.1f), a11 = hn::Set(d, 1.2f);
  for (int64_t i = 0; i < iterations; ++i) {
    a0 = hn::MulAdd(a0, m, c), a1 = hn::MulAdd(a1, m, c), a2 = hn::MulAdd(a2, m, c);
    a3 = hn::MulAdd(a3, m, c), a4 = hn::MulAdd(a4, m, c), a5 = hn::MulAdd(a5, m, c);
    a6 = hn::MulAdd(a6, m, c), a7 = hn::MulAdd(a7, m, c), a8 = hn::MulAdd(a8, m, c);
    a9 = hn::MulAdd(a9, m, c), a10 = hn::MulAdd(a10, m, c), a11 = hn::MulAdd(a11, m, c);
  }
  const auto s = hn::Add(hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7))),
                         hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)));
  return hn::GetLane(hn::SumOfLanes(d, s));
}

int64_t FmaPeakFlopsPerIteration() {
  const hn::ScalableTag<float> d;
  return 2 * kAccumulators * static_cast<int64_t>(hn::Lanes(d));
}
}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

namespace ddp::kernels::cpu {
HWY_EXPORT(FmaPeakLoop);
HWY_EXPORT(FmaPeakFlopsPerIteration);

float fma_peak_loop(int64_t iterations) { return HWY_DYNAMIC_DISPATCH(FmaPeakLoop)(iterations); }
int64_t fma_peak_flops_per_iteration() { return HWY_DYNAMIC_DISPATCH(FmaPeakFlopsPerIteration)(); }

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
volatile float g_sink = 0;  // keeps the loop's result alive
}  // namespace

double measure_fma_peak_gflops(double seconds) {
  int64_t iterations = 1 << 16;
  double best = 0;
  const auto start = Clock::now();
  while (seconds_since(start) < seconds) {
    const auto t0 = Clock::now();
    g_sink = g_sink + fma_peak_loop(iterations);
    const double s = seconds_since(t0);
    if (s < 1e-3) {
      iterations *= 2;  // too short to time: grow until a run takes a millisecond
      continue;
    }
    best = std::max(best, static_cast<double>(iterations * fma_peak_flops_per_iteration()) / s / 1e9);
  }
  return best;
}

double measure_copy_gbps(int64_t bytes, double seconds) {
  const auto n = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  std::unique_ptr<char[]> src(new char[n]), dst(new char[n]);
  std::memset(src.get(), 1, n);
  std::memset(dst.get(), 0, n);  // first touch of the pages outside the timed copies
  double best = 0;
  const auto start = Clock::now();
  do {
    const auto t0 = Clock::now();
    std::memcpy(dst.get(), src.get(), n);
    g_sink = g_sink + static_cast<float>(dst[n / 2]);
    best = std::max(best, 2.0 * static_cast<double>(n) / seconds_since(t0) / 1e9);
  } while (seconds_since(start) < seconds);
  return best;
}
}  // namespace ddp::kernels::cpu
#endif  // HWY_ONCE

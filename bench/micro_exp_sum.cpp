// micro_exp_sum.cpp - the exp-and-sum loop alone, the floor under the float32 cross-entropy forward
// (docs/benchmarks.md, "CPU kernels against copy bandwidth"): sum_i exp(x[i]) over n float32 values in cache
// with the kernels' own ExpFast (kernels/cpu/simd-inl.h, the instruction set Highway picks at run time), four
// independent accumulators, nothing written - the same reads as cross_entropy fwd, none of its max pass, row
// logic or target picking. Counter ns_per_16: nanoseconds per 16 floats (one AVX-512 vector).
// Run: OPENBLAS_CORETYPE=SkylakeX build/bin/bench_micro_exp_sum --benchmark_repetitions=3
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/micro_exp_sum.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"
#include "kernels/cpu/simd-inl.h"

#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
// n must be a multiple of 4 vectors (the benchmark's sizes are).
float ExpSumF32(const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  for (int64_t i = 0; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::Add(s0, ExpFast(d, hn::LoadU(d, x + i)));
    s1 = hn::Add(s1, ExpFast(d, hn::LoadU(d, x + i + N)));
    s2 = hn::Add(s2, ExpFast(d, hn::LoadU(d, x + i + 2 * N)));
    s3 = hn::Add(s3, ExpFast(d, hn::LoadU(d, x + i + 3 * N)));
  }
  return ReduceSum(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3)));  // simd-inl.h
}
}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <benchmark/benchmark.h>

#include <vector>

namespace ddp::kernels::cpu {
HWY_EXPORT(ExpSumF32);
}  // namespace ddp::kernels::cpu

namespace {

void ExpSum(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 997) * 0.01f - 5.0f;
  for (auto _ : state)
    benchmark::DoNotOptimize(HWY_DYNAMIC_DISPATCH(ddp::kernels::cpu::ExpSumF32)(x.data(), n));
  state.SetBytesProcessed(state.iterations() * n * static_cast<int64_t>(sizeof(float)));
  state.counters["ns_per_16"] =
      benchmark::Counter(static_cast<double>(n) / 16 * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  // The instruction set the dispatcher picks: the best (lowest bit) of those supported and compiled.
  int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  state.SetLabel(hwy::TargetName(targets & -targets));
}
BENCHMARK(ExpSum)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
#endif  // HWY_ONCE

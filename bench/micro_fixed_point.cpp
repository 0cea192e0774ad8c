// micro_fixed_point.cpp - the deterministic mode's three passes over a gradient (kernels/cpu/fixed_point.h,
// docs/determinism.md) against the copy bandwidth they are bound by: block exponents (reads 4 B per float32
// element), quantize (reads 4, writes 8), dequantize to the mean (reads 8, writes 4), and memcpy of the same
// bytes. n defaults to the mlp's 1,863,690 parameters. Counters: GB/s of the bytes each pass reads + writes.
// Run: build/bin/bench_micro_fixed_point --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/fixed_point.h"

using namespace ddp::kernels::cpu;

namespace {
constexpr int64_t kBlock = 256;

struct Data {
  std::vector<float> x, out;
  std::vector<int64_t> acc;
  std::vector<int32_t> exps;
  explicit Data(int64_t n)
      : x(static_cast<size_t>(n)), out(static_cast<size_t>(n)), acc(static_cast<size_t>(n)),
        exps(static_cast<size_t>((n + kBlock - 1) / kBlock), kNoExponent) {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    for (auto& v : x) v = nd(rng) * 1e-3f;
    block_exponents(x.data(), n, kBlock, exps.data());
    quantize_add(x.data(), n, kBlock, exps.data(), 2, acc.data(), true);
  }
};

void set_bytes(benchmark::State& state, int64_t bytes_per_element) {
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(state.range(0) * bytes_per_element),
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void FixedPoint_BlockExponents(benchmark::State& state) {
  Data d(state.range(0));
  for (auto _ : state) {
    std::fill(d.exps.begin(), d.exps.end(), kNoExponent);
    block_exponents(d.x.data(), state.range(0), kBlock, d.exps.data());
    benchmark::DoNotOptimize(d.exps.data());
  }
  set_bytes(state, 4);
}
void FixedPoint_Quantize(benchmark::State& state) {
  Data d(state.range(0));
  for (auto _ : state) {
    quantize_add(d.x.data(), state.range(0), kBlock, d.exps.data(), 2, d.acc.data(), /*first=*/true);
    benchmark::DoNotOptimize(d.acc.data());
  }
  set_bytes(state, 12);
}
void FixedPoint_DequantizeMean(benchmark::State& state) {
  Data d(state.range(0));
  for (auto _ : state) {
    dequantize_mean(d.acc.data(), state.range(0), kBlock, d.exps.data(), 2, 2, d.out.data());
    benchmark::DoNotOptimize(d.out.data());
  }
  set_bytes(state, 12);
}
void FixedPoint_Memcpy12B(benchmark::State& state) {  // the same 12 bytes per element, copied
  std::vector<char> a(static_cast<size_t>(state.range(0)) * 6), b(a.size());
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), a.size());
    benchmark::DoNotOptimize(b.data());
  }
  set_bytes(state, 12);
}
}  // namespace

BENCHMARK(FixedPoint_BlockExponents)->Arg(1863690)->Unit(benchmark::kMillisecond);
BENCHMARK(FixedPoint_Quantize)->Arg(1863690)->Unit(benchmark::kMillisecond);
BENCHMARK(FixedPoint_DequantizeMean)->Arg(1863690)->Unit(benchmark::kMillisecond);
BENCHMARK(FixedPoint_Memcpy12B)->Arg(1863690)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();

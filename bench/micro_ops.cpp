// micro_ops.cpp - micro-benchmarks of the core ops:
//  (a) a linear layer's forward + backward through the engine (ops::linear + autograd::backward: 3 GEMMs plus
//      the bias fill and bias-gradient column sums, node bookkeeping, allocations) against the same 3 raw
//      cblas_sgemm calls on preallocated buffers, at MLP shapes (64 rows) and GPT shapes (B*T = 1024 tokens).
//      FLOPs per iteration = 3 * 2 * rows * in * out; the table after the run gives engine/raw (target
//      <= 1.10).
//  (b) per-op dispatch overhead: a 1-element add, without and with autograd recording (target < 1 us).
//      Attention_Gpt/<T>/<0 fwd, 1 bwd>/<threads>: the GPT's causal self-attention kernels at one and two
//      threads, bench_e2e's gpt per-rank shape (batch 16, 4 heads, C 128) at context 64 and 256.
//  (c) Kernel_VsCopy/<k>/<threads>/<n>: each CPU kernel on n = 1M float32 elements (in cache) and 16M (64 MiB
//      per array: memory-bound) (Highway, the instruction set the dispatcher picked) against memcpy of the
//      same n floats, interleaved in one loop; counters give both GB/s (bytes the kernel must read + write)
//      and kernel/copy (the target: >= 0.5). The table after the run lists them.
//      Kernel_Threads/<k>/<n>: each kernel at 16K-16M elements with 1 and 2 threads interleaved, the split
//      forced: the second thread's speedup per size (the split thresholds of kernels/cpu/parallel.h).
//  (d) Gemm_Library/<shape>/<library>: each float32 product of the models (MLP 784-1024-1024-10 at batch 64,
//      GPT d128 at 1024 tokens, its 64x64x32 attention blocks) on OpenBLAS, on oneDNN, under the auto rule
//      (kernels/cpu/gemm_backend.h) and on BLIS (when libblis4 loads), against Gemm_Peak: a 1024^3 product on
//      each library measured in the same run (the best of them is "peak"). The table after the run gives
//      GFLOP/s per library and % of peak. Entries of one library run back to back (alternating the libraries
//      call by call at > 1 thread would measure their thread pools fighting, not the kernels): add
//      --benchmark_repetitions=N
//      --benchmark_enable_random_interleaving=true to interleave them.
//      Gemm_StepSequence/<0 mlp, 1 gpt>: every linear-layer product of one training step (forward, input and
//      weight gradients) on each library, all interleaved in one loop, in CPU time of the calling
//      thread (steady on a loaded machine); run it with --blas_threads=1 (one thread: no thread pools to
//      fight).
//  (e) Peak_Fma: the single-core float32 FMA peak (an unrolled loop of 12 independent multiply-adds at the
//      widest instruction set Highway picks, kernels/cpu/peak_probe.h), counter GFLOP/s; Peak_Copy: a 256 MiB
//      memcpy on one core, counter GB/s (bytes read + written per second, as Kernel_VsCopy's copy_GBps). The
//      ceilings the GEMM rows (% of the FMA peak) and the memory-bound kernels (vs copy) are measured
//      against. Run alone: bench_micro_ops --benchmark_filter=Peak_
// OpenBLAS threads: --blas_threads=N or DDP_BLAS_THREADS=N (default: OpenBLAS's own choice).
// Run: bench_micro_ops --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor/cpu_allocator.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_backend.h"
#include "kernels/cpu/gemm_blis.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/peak_probe.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/simd_target.h"
#include "kernels/cpu/softmax.h"
#include "runtime/autograd/engine.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/linalg.h"

using namespace ddp;

namespace {

// Benchmark arrays come from the tensors' allocator (runtime/tensor/cpu_allocator.h, 64-byte aligned): a
// std::vector of 4 MiB from the heap is only 16-byte aligned, and then every 64-byte vector load of a kernel
// straddles two cache lines (exp on 1M floats ran 1.5x slower that way once glibc served such blocks from the
// heap).
template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(cpu_allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { cpu_free(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const Aligned64<U>&) const {
    return true;
  }
};
template <class T>
using AlignedVector = std::vector<T, Aligned64<T>>;
double linear_flops(int64_t rows, int64_t in, int64_t out) { return 3.0 * 2.0 * rows * in * out; }

void set_flop_counters(benchmark::State& state, double flops_per_iter) {
  state.counters["FLOP/iter"] = flops_per_iter;
  state.counters["FLOP/s"] = benchmark::Counter(flops_per_iter * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate);
}

// Holds a linear layer's tensors for the engine path and plain buffers for the raw path; one_engine_step /
// one_raw_step run forward + backward once.
struct LinearCase {
  int64_t rows, in, out;
  Tensor x, w, b, g;
  AlignedVector<float> rx, rw, rg, ry, rdx, rdw;
  LinearCase(int64_t rows_, int64_t in_, int64_t out_) : rows(rows_), in(in_), out(out_) {
    x = Tensor::randn({rows, in}, 1, DType::F32).set_requires_grad(true);
    w = Tensor::randn({out, in}, 2, DType::F32, 0.05).set_requires_grad(true);
    b = Tensor::randn({out}, 3, DType::F32).set_requires_grad(true);
    g = Tensor::randn({rows, out}, 4, DType::F32);
    rx.assign(rows * in, 0.5f);
    rw.assign(out * in, 0.25f);
    rg.assign(rows * out, 1.0f);
    ry.resize(rows * out);
    rdx.resize(rows * in);
    rdw.resize(out * in);
  }
  void one_engine_step() {
    x.set_grad(Tensor());  // set_to_none, as an optimizer's zero_grad would
    w.set_grad(Tensor());
    b.set_grad(Tensor());
    Tensor y = ops::linear(x, w, b);
    autograd::backward({y}, {g});
    benchmark::DoNotOptimize(w.grad().raw_data());
  }
  // The same three products with cblas_sgemm on preallocated buffers: y = x W^T, dx = g W, dW = g^T x.
  void one_raw_step() {
    const int r = static_cast<int>(rows), i = static_cast<int>(in), o = static_cast<int>(out);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r, o, i, 1.0f, rx.data(), i, rw.data(), i, 0.0f,
                ry.data(), o);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, i, o, 1.0f, rg.data(), o, rw.data(), i, 0.0f,
                rdx.data(), i);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o, i, r, 1.0f, rg.data(), o, rx.data(), i, 0.0f,
                rdw.data(), i);
    benchmark::DoNotOptimize(rdw.data());
    benchmark::ClobberMemory();
  }
};

// Args: rows, in, out.
void Linear_Engine(benchmark::State& state) {
  LinearCase c(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) c.one_engine_step();
  set_flop_counters(state, linear_flops(c.rows, c.in, c.out));
}

void Linear_Raw(benchmark::State& state) {
  LinearCase c(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) c.one_raw_step();
  set_flop_counters(state, linear_flops(c.rows, c.in, c.out));
}

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Engine and raw steps interleaved in one loop, so both see the same machine load; counters give the median
// process-CPU time of each (microseconds) and their ratio (the figure the 10% target is about).
void Linear_Paired(benchmark::State& state) {
  LinearCase c(state.range(0), state.range(1), state.range(2));
  std::vector<double> eng, raw;
  for (auto _ : state) {
    const double t0 = process_cpu_seconds();
    c.one_raw_step();
    const double t1 = process_cpu_seconds();
    c.one_engine_step();
    const double t2 = process_cpu_seconds();
    raw.push_back(t1 - t0);
    eng.push_back(t2 - t1);
  }
  const double me = median(eng), mr = median(raw);
  state.counters["engine_us"] = me * 1e6;
  state.counters["raw_us"] = mr * 1e6;
  state.counters["ratio"] = mr > 0 ? me / mr : 0;
  set_flop_counters(state, 2 * linear_flops(c.rows, c.in, c.out));
}

void linear_shapes(benchmark::internal::Benchmark* b) {
  // MLP (batch 64): 784 -> 1024 -> 1024 -> 10
  b->Args({64, 784, 1024})->Args({64, 1024, 1024})->Args({64, 1024, 10});
  // GPT (B*T = 1024 tokens, C = 128): qkv, proj, mlp up, mlp down, 2C
  b->Args({1024, 128, 384})->Args({1024, 128, 128})->Args({1024, 128, 512})->Args({1024, 512, 128});
  b->Args({1024, 128, 256});
  // Process CPU time counts OpenBLAS's worker threads too, and is steadier than wall time on a busy machine.
  b->Unit(benchmark::kMicrosecond)->MeasureProcessCPUTime();
}
BENCHMARK(Linear_Engine)->Apply(linear_shapes);
BENCHMARK(Linear_Raw)->Apply(linear_shapes);
BENCHMARK(Linear_Paired)->Apply(linear_shapes);

// (b) dispatch overhead of one tiny op.
void TinyAdd_NoGrad(benchmark::State& state) {
  Tensor a = Tensor::ones({1}), b = Tensor::ones({1});
  for (auto _ : state) {
    Tensor c = ops::add(a, b);
    benchmark::DoNotOptimize(c.raw_data());
  }
}
BENCHMARK(TinyAdd_NoGrad)->Unit(benchmark::kNanosecond);

void TinyAdd_RecordGraph(benchmark::State& state) {
  Tensor a = Tensor::ones({1}).set_requires_grad(true), b = Tensor::ones({1}).set_requires_grad(true);
  for (auto _ : state) {
    Tensor c = ops::add(a, b);  // records an add node with edges to both leaves' accumulators
    benchmark::DoNotOptimize(c.raw_data());
  }
}
BENCHMARK(TinyAdd_RecordGraph)->Unit(benchmark::kNanosecond);

// (b') the GPT's causal self-attention (kernels/cpu/attention.h), forward or backward, at the bench_e2e gpt's
// shape per rank (batch 16, 4 heads, C 128) for context T: per (batch, head) two or four small products and
// the causal softmax over T rows of lengths 1..T (every row but each lanes-th one ends in a partial vector).
// Args: T, 0 forward / 1 backward, thread budget (1: the products' library is the rule's choice at budget 1;
// 2: the (batch, head) pairs split over the pool, OpenBLAS for the products).
void Attention_Gpt(benchmark::State& state) {
  const int64_t B = 16, H = 4, C = 128, T = state.range(0);
  const bool backward = state.range(1) == 1;
  const int saved_budget = kernels::cpu::thread_budget();
  kernels::cpu::set_thread_budget(static_cast<int>(state.range(2)));
  AlignedVector<float> qkv(B * T * 3 * C), y(B * T * C), att(B * H * T * T), dy(B * T * C),
      dqkv(B * T * 3 * C);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = std::sin(0.37f * static_cast<float>(i));
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = std::cos(0.11f * static_cast<float>(i));
  kernels::cpu::attention_forward(qkv.data(), y.data(), att.data(), B, T, C, H);
  for (auto _ : state) {
    if (backward)
      kernels::cpu::attention_backward(dy.data(), qkv.data(), att.data(), dqkv.data(), B, T, C, H);
    else
      kernels::cpu::attention_forward(qkv.data(), y.data(), att.data(), B, T, C, H);
    benchmark::ClobberMemory();
  }
  // the full (T, T) products' FLOPs (q k^T and att v forward, four products backward), whatever part of them
  // the kernels skip above the diagonal: the counter compares builds
  set_flop_counters(state, (backward ? 4.0 : 2.0) * 2.0 * B * H * T * T * (C / H));
  kernels::cpu::set_thread_budget(saved_budget);
}
BENCHMARK(Attention_Gpt)
    ->ArgsProduct({{64, 256}, {0, 1}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// (c) kernel throughput against copy bandwidth: 1M float32 elements (4 MiB per array: in cache) and 16M
// (64 MiB per array: out of the last-level cache, memory-bound). The 2-D kernels keep their row length
// (1024, 256 or 128 columns) and scale the number of rows with the size.
constexpr int64_t kN = 1 << 20;
constexpr int64_t kLargeN = 1 << 24;
struct KernelCase {
  const char* name;
  int reads, writes;  // arrays of n floats the kernel must read and write
};
const KernelCase kKernels[] = {
    {"relu fwd", 1, 1},
    {"gelu fwd", 1, 1},
    {"gelu bwd", 2, 1},
    {"tanh fwd", 1, 1},
    {"sigmoid fwd", 1, 1},
    {"exp fwd", 1, 1},
    {"log fwd", 1, 1},
    {"add (same shape)", 2, 1},
    {"add bias (rows x 1024 + 1024)", 1, 1},
    {"bias grad sum_to_shape", 1, 0},
    {"softmax fwd (rows x 256)", 1, 1},
    {"log_softmax fwd", 1, 1},
    {"softmax bwd", 2, 1},
    {"cross_entropy fwd", 1, 0},
    {"cross_entropy bwd", 1, 1},
    {"layernorm fwd (rows x 128)", 1, 1},
    {"layernorm bwd", 2, 1},
    {"sgd step (momentum)", 3, 2},
    {"adamw step", 4, 3},
    {"column sums (linear bias grad)", 1, 0},
    {"embedding fwd", 1, 1},
    {"dropout", 1, 1},
};
constexpr int kNumKernels = sizeof(kKernels) / sizeof(kKernels[0]);

// The inputs of every kernel for n elements (n a multiple of 1024).
struct KernelData {
  int64_t n;
  AlignedVector<float> a, b, c, d, e, out, small;
  AlignedVector<int64_t> targets, idx;
  explicit KernelData(int64_t n_)
      : n(n_),
        a(n),
        b(n),
        c(n),
        d(n),
        e(n),
        out(n),
        small(std::max<int64_t>(2 * (n / 128), 1024)),
        targets(n / 256),
        idx(n / 1024) {
    for (int64_t i = 0; i < n; ++i) {
      a[i] = std::sin(0.001f * static_cast<float>(i)) * 3.0f;
      b[i] = 0.5f + 0.25f * std::cos(0.003f * static_cast<float>(i));
      c[i] = 0.01f * b[i];
      d[i] = 0.1f;
      e[i] = 0.02f;
    }
    for (int64_t i = 0; i < n / 256; ++i) targets[i] = (i * 7) % 256;
    for (int64_t i = 0; i < n / 1024; ++i) idx[i] = (i * 13) % (n / 1024);
  }
  void run(int k) {
    float* o = out.data();
    const float* x = a.data();
    const int64_t r1024 = n / 1024, r256 = n / 256, r128 = n / 128;
    switch (k) {
      case 0:
        kernels::cpu::relu_forward(x, o, n);
        break;
      case 1:
        kernels::cpu::gelu_forward(x, o, n);
        break;
      case 2:
        kernels::cpu::gelu_backward(b.data(), x, o, n);
        break;
      case 3:
        kernels::cpu::tanh_forward(x, o, n);
        break;
      case 4:
        kernels::cpu::sigmoid_forward(x, o, n);
        break;
      case 5:
        kernels::cpu::exp_forward(x, o, n);
        break;
      case 6:
        kernels::cpu::log_forward(b.data(), o, n);
        break;
      case 7:
        kernels::cpu::binary_broadcast(x, {n}, b.data(), {n}, o, {n}, [](float p, float q) { return p + q; });
        break;
      case 8:
        kernels::cpu::binary_broadcast(x, {r1024, 1024}, b.data(), {1024}, o, {r1024, 1024},
                                       [](float p, float q) { return p + q; });
        break;
      case 9:
        kernels::cpu::sum_to_shape(x, {r1024, 1024}, o, {1024});
        break;
      case 10:
        kernels::cpu::softmax_forward(x, o, r256, 256);
        break;
      case 11:
        kernels::cpu::log_softmax_forward(x, o, r256, 256);
        break;
      case 12:
        kernels::cpu::softmax_backward(b.data(), x, o, r256, 256);
        break;
      case 13: {
        int64_t count = 0;
        benchmark::DoNotOptimize(kernels::cpu::cross_entropy_forward(x, targets.data(), r256, 256, false,
                                                                     -100, small.data(), &count));
        break;
      }
      case 14: {
        const float dl = 1.0f;
        kernels::cpu::cross_entropy_backward(x, targets.data(), small.data(), &dl, static_cast<double>(r256),
                                             r256, 256, false, -100, o);
        break;
      }
      case 15:
        kernels::cpu::layernorm_forward(x, b.data(), c.data(), o, small.data(), small.data() + r128, r128,
                                        128, 1e-5);
        break;
      case 16:
        kernels::cpu::layernorm_backward(b.data(), x, c.data(), small.data(), small.data() + r128, o,
                                         d.data(), e.data(), r128, 128);
        break;
      case 17:
        kernels::cpu::sgd_step(o, c.data(), d.data(), n, 1e-3, 0.9, 0.0, 0.0, false, false);
        break;
      case 18:
        kernels::cpu::adamw_step(o, c.data(), d.data(), e.data(), n, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.5, 0.1);
        break;
      case 19:
        kernels::cpu::sum_middle(x, 1, r1024, 1024, small.data(), 1.0);
        break;
      case 20:
        kernels::cpu::embedding_forward(x, idx.data(), o, r1024, 1024);
        break;
      case 21:
        kernels::cpu::dropout_apply(x, o, n, kernels::cpu::dropout_key(1), 0,
                                    kernels::cpu::dropout_threshold(0.1), 1.0f / 0.9f);
        break;
    }
    benchmark::DoNotOptimize(o);
    benchmark::ClobberMemory();
  }
};
// One KernelData per size, built on first use and kept (the runs alternate between sizes).
KernelData& kernel_data(int64_t n) {
  static std::map<int64_t, std::unique_ptr<KernelData>> by_size;
  auto& slot = by_size[n];
  if (!slot) slot = std::make_unique<KernelData>(n);
  return *slot;
}
std::string size_name(int64_t n) {
  return n >= (1 << 20) ? std::to_string(n >> 20) + "M" : std::to_string(n >> 10) + "K";
}

// Kernel_VsCopy/<k>/<threads>/<n>: the kernel and the copy both run with a thread budget of `threads` (the
// copy split across the pool like a memory-bound kernel: from kParallelMinStreaming elements per thread), on
// n elements, so the ratio compares like with like.
void Kernel_VsCopy(benchmark::State& state) {
  const int k = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const int64_t n = state.range(2);
  KernelData& data = kernel_data(n);
  const int saved_budget = kernels::cpu::thread_budget();
  kernels::cpu::set_thread_budget(threads);
  AlignedVector<float> src(n, 1.0f), dst(n);
  std::vector<double> tk, tc;
  using Clock = std::chrono::steady_clock;
  // One untimed round first: at 16M a first touch of pages on this VM costs ~150 ms, and with
  // --benchmark_min_time=0.1 that single slow iteration was the whole sample.
  std::memcpy(dst.data(), src.data(), static_cast<size_t>(n) * sizeof(float));
  data.run(k);
  for (auto _ : state) {
    const auto t0 = Clock::now();
    kernels::cpu::parallel_for(n, 64, kernels::cpu::kParallelMinStreaming, [&](int64_t b, int64_t e) {
      std::memcpy(dst.data() + b, src.data() + b, static_cast<size_t>(e - b) * sizeof(float));
    });
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    const auto t1 = Clock::now();
    data.run(k);
    const auto t2 = Clock::now();
    tc.push_back(std::chrono::duration<double>(t1 - t0).count());
    tk.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  const double kernel_bytes = static_cast<double>(kKernels[k].reads + kKernels[k].writes) * n * sizeof(float);
  const double copy_bytes = 2.0 * n * sizeof(float);
  const double gk = kernel_bytes / median(tk) / 1e9, gc = copy_bytes / median(tc) / 1e9;
  state.counters["kernel_GBps"] = gk;
  state.counters["copy_GBps"] = gc;
  state.counters["kernel_ms"] = median(tk) * 1e3;
  state.counters["vs_copy"] = gk / gc;
  state.SetLabel(std::string(kKernels[k].name) + " | " + size_name(n) + " | " + std::to_string(threads));
  kernels::cpu::set_thread_budget(saved_budget);
}
BENCHMARK(Kernel_VsCopy)
    ->ArgsProduct({benchmark::CreateDenseRange(0, kNumKernels - 1, 1), {1, 2}, {kN, kLargeN}})
    ->Unit(benchmark::kMicrosecond);

// Kernel_Threads/<k>/<n>: the kernel on n elements with a pool budget of 1 and of 2 (set_pool_budget_only:
// OpenBLAS keeps its 2 threads throughout), interleaved in one loop, every parallel_for forced to split
// (set_parallel_split_always), so the second thread's gain or loss is seen at sizes below the split threshold
// too. Counters: median microseconds of each and speedup = 1-thread / 2-thread time (> 1: the second thread
// pays). The table after the run lists the speedups per size, the measurement behind the per-op thresholds of
// kernels/cpu/parallel.h.
void Kernel_Threads(benchmark::State& state) {
  const int k = static_cast<int>(state.range(0));
  const int64_t n = state.range(1);
  KernelData& data = kernel_data(n);
  const int saved_budget = kernels::cpu::thread_budget();
  kernels::cpu::set_thread_budget(2);  // OpenBLAS's threads stay as they are during the loop
  kernels::cpu::set_parallel_split_always(true);
  std::vector<double> t1, t2;
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    kernels::cpu::set_pool_budget_only(1);
    const auto a = Clock::now();
    data.run(k);
    const auto b = Clock::now();
    kernels::cpu::set_pool_budget_only(2);
    const auto c = Clock::now();
    data.run(k);
    const auto d = Clock::now();
    t1.push_back(std::chrono::duration<double>(b - a).count());
    t2.push_back(std::chrono::duration<double>(d - c).count());
  }
  kernels::cpu::set_parallel_split_always(false);
  kernels::cpu::set_thread_budget(saved_budget);
  state.counters["t1_us"] = median(t1) * 1e6;
  state.counters["t2_us"] = median(t2) * 1e6;
  state.counters["speedup"] = median(t1) / median(t2);
  state.SetLabel(std::string(kKernels[k].name) + " | " + size_name(n));
}
BENCHMARK(Kernel_Threads)
    ->ArgsProduct({benchmark::CreateDenseRange(0, kNumKernels - 1, 1),
                   {1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24}})
    ->Unit(benchmark::kMicrosecond);

// Parallel_Threshold/<n>/<threads>: gelu forward (a compute-heavy kernel) and relu forward (a memory-bound
// one) on n float32 elements, split across `threads` regardless of kParallelMinElements, to find the size
// from which the pool's wake-up pays off (kernels/cpu/parallel.h). Reports the median microseconds of each.
void Parallel_Threshold(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const int saved_budget = kernels::cpu::thread_budget();
  kernels::cpu::set_thread_budget(threads);
  AlignedVector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = std::sin(0.001f * static_cast<float>(i)) * 3.0f;
  std::vector<double> tg, tr;
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    kernels::cpu::parallel_for(n, 64, 64, [&](int64_t b, int64_t e) {
      kernels::cpu::gelu_forward(x.data() + b, y.data() + b, e - b);  // serial inside a pool task
    });
    const auto t1 = Clock::now();
    kernels::cpu::parallel_for(n, 64, 64, [&](int64_t b, int64_t e) {
      kernels::cpu::relu_forward(x.data() + b, y.data() + b, e - b);
    });
    const auto t2 = Clock::now();
    benchmark::DoNotOptimize(y.data());
    tg.push_back(std::chrono::duration<double>(t1 - t0).count());
    tr.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  state.counters["gelu_us"] = median(tg) * 1e6;
  state.counters["relu_us"] = median(tr) * 1e6;
  kernels::cpu::set_thread_budget(saved_budget);
}
BENCHMARK(Parallel_Threshold)
    ->ArgsProduct({{4096, 8192, 16384, 32768, 65536, 262144}, {1, 2}})
    ->Unit(benchmark::kMicrosecond);

// (d) the model's GEMM shapes per library, against the peak measured in the same run.
struct GemmShape {
  const char* name;
  bool ta, tb;
  int64_t M, N, K;
};
const GemmShape kGemmShapes[] = {
    {"mlp fc1 fwd 64x1024 k784", false, true, 64, 1024, 784},
    {"mlp fc2 fwd 64x1024 k1024", false, true, 64, 1024, 1024},
    {"mlp fc3 fwd 64x10 k1024", false, true, 64, 10, 1024},
    {"mlp fc2 dX 64x1024 k1024", false, false, 64, 1024, 1024},
    {"mlp fc3 dX 64x1024 k10", false, false, 64, 1024, 10},
    {"mlp fc1 dW 1024x784 k64", true, false, 1024, 784, 64},
    {"mlp fc2 dW 1024x1024 k64", true, false, 1024, 1024, 64},
    {"mlp fc3 dW 10x1024 k64", true, false, 10, 1024, 64},
    {"gpt qkv fwd 1024x384 k128", false, true, 1024, 384, 128},
    {"gpt proj fwd 1024x128 k128", false, true, 1024, 128, 128},
    {"gpt fc fwd 1024x512 k128", false, true, 1024, 512, 128},
    {"gpt fcproj fwd 1024x128 k512", false, true, 1024, 128, 512},
    {"gpt fc dX 1024x128 k512", false, false, 1024, 128, 512},
    {"gpt qkv dX 1024x128 k384", false, false, 1024, 128, 384},
    {"gpt fc dW 512x128 k1024", true, false, 512, 128, 1024},
    {"gpt qkv dW 384x128 k1024", true, false, 384, 128, 1024},
    {"attn q k^T 64x64 k32", false, true, 64, 64, 32},
    {"attn att v 64x32 k64", false, false, 64, 32, 64},
};
constexpr int kNumGemmShapes = sizeof(kGemmShapes) / sizeof(kGemmShapes[0]);
const kernels::cpu::GemmBackend kGemmLibraries[] = {kernels::cpu::GemmBackend::OpenBLAS,
                                                    kernels::cpu::GemmBackend::OneDNN,
                                                    kernels::cpu::GemmBackend::Auto,
                                                    kernels::cpu::GemmBackend::BLIS};

// Times `state` products of one shape on one library (wall time: the library's own threads do the work).
void run_gemm(benchmark::State& state, const GemmShape& g, kernels::cpu::GemmBackend library) {
  if (library == kernels::cpu::GemmBackend::OneDNN && !kernels::cpu::onednn_available()) {
    state.SkipWithError("this build has no oneDNN (install libdnnl-dev and reconfigure)");
    return;
  }
  if (library == kernels::cpu::GemmBackend::BLIS && !kernels::cpu::blis_available()) {
    state.SkipWithError(kernels::cpu::blis_version().c_str());
    return;
  }
  const kernels::cpu::GemmBackend saved = kernels::cpu::gemm_backend();
  kernels::cpu::set_gemm_backend(library);
  AlignedVector<float> A(g.M * g.K, 0.5f), B(g.K * g.N, 0.25f), C(g.M * g.N);
  for (size_t i = 0; i < A.size(); ++i) A[i] = 0.01f * static_cast<float>(i % 17);
  for (size_t i = 0; i < B.size(); ++i) B[i] = 0.02f * static_cast<float>(i % 13);
  // One product first: oneDNN's first call per shape class generates its kernel (tens of ms).
  kernels::cpu::gemm(g.ta, g.tb, g.M, g.N, g.K, 1.0f, A.data(), B.data(), 0.0f, C.data());
  for (auto _ : state) {
    kernels::cpu::gemm(g.ta, g.tb, g.M, g.N, g.K, 1.0f, A.data(), B.data(), 0.0f, C.data());
    benchmark::DoNotOptimize(C.data());
    benchmark::ClobberMemory();
  }
  kernels::cpu::set_gemm_backend(saved);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * g.M * g.N * g.K * 1e-9 * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate);
  const int64_t threads = kernels::cpu::blas_threads();
  state.SetLabel(std::string(g.name) + " | " + kernels::cpu::gemm_backend_name(library) +
                 (library == kernels::cpu::GemmBackend::Auto
                      ? std::string("->") + kernels::cpu::gemm_backend_name(
                                                kernels::cpu::gemm_backend_for(g.M, g.N, g.K, static_cast<int>(threads)))
                      : std::string()));
}

// Args: shape index, library index (0 openblas, 1 onednn, 2 auto, 3 blis).
void Gemm_Library(benchmark::State& state) {
  run_gemm(state, kGemmShapes[state.range(0)], kGemmLibraries[state.range(1)]);
}
BENCHMARK(Gemm_Library)
    ->ArgsProduct({benchmark::CreateDenseRange(0, kNumGemmShapes - 1, 1), {0, 1, 2, 3}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The products of one training step's linear layers, in the order the step runs them.
std::vector<GemmShape> step_sequence(bool gpt) {
  // (rows, in, out) per linear layer: forward x W^T (rows x out, k in), input gradient g W (rows x in, k out;
  // not for the first MLP layer, whose input is data), weight gradient g^T x (out x in, k rows).
  std::vector<std::array<int64_t, 3>> layers;
  if (gpt)
    layers = {{1024, 128, 384}, {1024, 128, 128}, {1024, 128, 512}, {1024, 512, 128},
              {1024, 128, 384}, {1024, 128, 128}, {1024, 128, 512}, {1024, 512, 128}, {1024, 128, 256}};
  else
    layers = {{64, 784, 1024}, {64, 1024, 1024}, {64, 1024, 10}};
  std::vector<GemmShape> seq;
  for (const auto& l : layers) seq.push_back({"fwd", false, true, l[0], l[2], l[1]});
  for (size_t i = layers.size(); i-- > 0;) {
    const auto& l = layers[i];
    if (gpt || i > 0) seq.push_back({"dX", false, false, l[0], l[1], l[2]});
    seq.push_back({"dW", true, false, l[2], l[1], l[0]});
  }
  return seq;
}

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Args: 0 mlp, 1 gpt. Counters: median thread-CPU ms of the step's products per library (those this machine has:
// OpenBLAS always, oneDNN and auto when built in, BLIS when it loads) and auto/openblas, blis/openblas.
void Gemm_StepSequence(benchmark::State& state) {
  const std::vector<GemmShape> seq = step_sequence(state.range(0) == 1);
  const kernels::cpu::GemmBackend saved = kernels::cpu::gemm_backend();
  AlignedVector<float> A(1 << 20), B(1 << 20), C(1 << 20);
  for (size_t i = 0; i < A.size(); ++i)
    A[i] = 0.01f * static_cast<float>(i % 17), B[i] = 0.02f * static_cast<float>(i % 13);
  std::vector<kernels::cpu::GemmBackend> libs = {kernels::cpu::GemmBackend::OpenBLAS};
  if (kernels::cpu::onednn_available())
    libs.insert(libs.end(), {kernels::cpu::GemmBackend::OneDNN, kernels::cpu::GemmBackend::Auto});
  if (kernels::cpu::blis_available()) libs.push_back(kernels::cpu::GemmBackend::BLIS);
  std::vector<std::vector<double>> t(libs.size());
  auto run_all = [&] {
    for (const GemmShape& g : seq)
      kernels::cpu::gemm(g.ta, g.tb, g.M, g.N, g.K, 1.0f, A.data(), B.data(), 0.0f, C.data());
  };
  for (auto lib : libs) kernels::cpu::set_gemm_backend(lib), run_all();  // warm-up
  for (auto _ : state) {
    for (size_t l = 0; l < libs.size(); ++l) {  // interleaved: load drift hits every library alike
      kernels::cpu::set_gemm_backend(libs[l]);
      const double t0 = thread_cpu_seconds();
      run_all();
      t[l].push_back(thread_cpu_seconds() - t0);
    }
    benchmark::DoNotOptimize(C.data());
  }
  kernels::cpu::set_gemm_backend(saved);
  for (size_t l = 0; l < libs.size(); ++l) {
    const std::string name = kernels::cpu::gemm_backend_name(libs[l]);
    state.counters[name + "_ms"] = median(t[l]) * 1e3;
    if (l > 0) state.counters[name + "/openblas"] = median(t[l]) / median(t[0]);
  }
  state.SetLabel(state.range(0) == 1 ? "gpt step's linear GEMMs" : "mlp step's GEMMs");
}
BENCHMARK(Gemm_StepSequence)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// The roofline for the table: a 1024^3 product on each library. Args: library index.
void Gemm_Peak(benchmark::State& state) {
  run_gemm(state, {"peak 1024x1024 k1024", false, false, 1024, 1024, 1024}, kGemmLibraries[state.range(0)]);
}
BENCHMARK(Gemm_Peak)->Arg(0)->Arg(1)->Arg(3)->Unit(benchmark::kMillisecond)->UseRealTime();

// (e) The machine's own ceilings on one core (kernels/cpu/peak_probe.h).
void Peak_Fma(benchmark::State& state) {
  const int64_t iterations = 1 << 20;
  const double flops = static_cast<double>(iterations * kernels::cpu::fma_peak_flops_per_iteration());
  for (auto _ : state) benchmark::DoNotOptimize(kernels::cpu::fma_peak_loop(iterations));
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(kernels::cpu::simd_target_name());
}
BENCHMARK(Peak_Fma)->Unit(benchmark::kMillisecond)->UseRealTime();

void Peak_Copy(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  std::unique_ptr<char[]> src(new char[bytes]), dst(new char[bytes]);
  std::memset(src.get(), 1, bytes);
  std::memset(dst.get(), 0, bytes);  // the pages' first touch outside the timed copies
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), bytes);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(2e-9 * static_cast<double>(bytes) * static_cast<double>(state.iterations()),
                                              benchmark::Counter::kIsRate);
  state.SetLabel("memcpy, one core, read + write bytes");
}
BENCHMARK(Peak_Copy)->Arg(int64_t{256} << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

// Prints the usual console table, then the engine/raw table of Linear_Paired (medians when repeated).
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      const bool single = r.run_type == Run::RT_Iteration && r.repetitions <= 1;
      if (r.error_occurred || !(single || r.aggregate_name == "median")) continue;
      auto get = [&](const char* k) {
        auto it = r.counters.find(k);
        return it == r.counters.end() ? 0.0 : it->second.value;
      };
      if (r.run_name.function_name == "Kernel_VsCopy") {
        kernels_.push_back(
            {r.report_label, get("kernel_ms"), get("kernel_GBps"), get("copy_GBps"), get("vs_copy")});
        continue;
      }
      if (r.run_name.function_name == "Kernel_Threads") {
        const std::string label = r.report_label;
        const size_t bar = label.find(" | ");
        const std::string name = label.substr(0, bar), size = label.substr(bar + 3);
        if (std::find(threads_order_.begin(), threads_order_.end(), name) == threads_order_.end())
          threads_order_.push_back(name);
        if (std::find(threads_sizes_.begin(), threads_sizes_.end(), size) == threads_sizes_.end())
          threads_sizes_.push_back(size);
        threads_[name][size] = get("speedup");
        continue;
      }
      if (r.run_name.function_name == "Gemm_Library" || r.run_name.function_name == "Gemm_Peak") {
        const std::string label = r.report_label;
        const size_t bar = label.find(" | ");
        const std::string shape = label.substr(0, bar), library = label.substr(bar + 3);
        if (r.run_name.function_name == "Gemm_Peak")
          peak_ = std::max(peak_, get("GFLOP/s")), peak_by_[library] = get("GFLOP/s");
        else
          gemm_[shape][library.substr(0, library.find("->"))] = {get("GFLOP/s"), library};
        if (std::find(gemm_order_.begin(), gemm_order_.end(), shape) == gemm_order_.end() &&
            r.run_name.function_name == "Gemm_Library")
          gemm_order_.push_back(shape);
        continue;
      }
      if (r.run_name.function_name != "Linear_Paired") continue;
      rows_[r.run_name.args] = {get("engine_us"), get("raw_us"), get("ratio")};
    }
  }
  void PrintRatios() const {
    if (!gemm_order_.empty()) {
      std::printf("\nfloat32 GEMMs at the model shapes, %d thread(s), %s\n", kernels::cpu::blas_threads(),
                  kernels::cpu::gemm_libraries().c_str());
      std::printf("  peak (1024^3 product): openblas %.1f GFLOP/s, onednn %.1f GFLOP/s, blis %.1f GFLOP/s\n",
                  at(peak_by_, "openblas"), at(peak_by_, "onednn"), at(peak_by_, "blis"));
      std::printf("  %-30s %9s %9s %9s %9s %-9s %8s %8s\n", "shape", "openblas", "onednn", "blis", "auto", "auto ->",
                  "best/pk", "auto/pk");
      for (const std::string& shape : gemm_order_) {
        const auto& row = gemm_.at(shape);
        const double ob = at(row, "openblas").gflops, od = at(row, "onednn").gflops, bl = at(row, "blis").gflops,
                     au = at(row, "auto").gflops;
        const std::string& label = at(row, "auto").label;
        const std::string pick = label.find("->") == std::string::npos ? "" : label.substr(label.find("->") + 2);
        std::printf("  %-30s %9.1f %9.1f %9.1f %9.1f %-9s %7.0f%% %7.0f%%\n", shape.c_str(), ob, od, bl, au,
                    pick.c_str(), peak_ > 0 ? 100 * std::max({ob, od, bl}) / peak_ : 0.0,
                    peak_ > 0 ? 100 * au / peak_ : 0.0);
      }
    }
    if (!kernels_.empty()) {
      std::printf(
          "\nCPU kernels on float32 arrays (%s), against memcpy interleaved in the same loop (medians)\n",
          kernels::cpu::simd_target_name());
      std::printf("  %-32s %5s %7s %10s %10s %10s %8s\n", "kernel", "size", "threads", "ms", "GB/s",
                  "copy GB/s", "vs copy");
      for (const KernelRow& k : kernels_) {
        const size_t bar1 = k.name.find(" | "), bar2 = k.name.rfind(" | ");
        std::printf("  %-32s %5s %7s %10.3f %10.2f %10.2f %8.2f\n", k.name.substr(0, bar1).c_str(),
                    k.name.substr(bar1 + 3, bar2 - bar1 - 3).c_str(), k.name.substr(bar2 + 3).c_str(), k.ms,
                    k.gbps, k.copy, k.ratio);
      }
    }
    if (!threads_order_.empty()) {
      std::printf(
          "\nsecond thread's speedup (1-thread time / 2-thread time, split forced), per size (medians)\n");
      std::printf("  %-32s", "kernel");
      for (const std::string& size : threads_sizes_) std::printf(" %7s", size.c_str());
      std::printf("\n");
      for (const std::string& name : threads_order_) {
        std::printf("  %-32s", name.c_str());
        for (const std::string& size : threads_sizes_) std::printf(" %7.2f", at(at(threads_, name), size));
        std::printf("\n");
      }
    }
    if (rows_.empty()) return;
    std::printf(
        "\nlinear forward+backward (3 GEMMs), engine vs raw cblas, interleaved, median process CPU time\n");
    std::printf("  %-16s %12s %12s %8s\n", "rows/in/out", "engine us", "raw us", "ratio");
    for (const auto& [args, row] : rows_)
      std::printf("  %-16s %12.1f %12.1f %8.3f\n", args.c_str(), row.engine_us, row.raw_us, row.ratio);
  }

 private:
  struct Row {
    double engine_us = 0, raw_us = 0, ratio = 0;
  };
  std::map<std::string, Row> rows_;
  struct KernelRow {
    std::string name;
    double ms, gbps, copy, ratio;
  };
  std::vector<KernelRow> kernels_;
  std::map<std::string, std::map<std::string, double>> threads_;
  std::vector<std::string> threads_order_, threads_sizes_;
  struct GemmCell {
    double gflops = 0;
    std::string label;
  };
  template <class Map>
  static typename Map::mapped_type at(const Map& m, const std::string& k) {
    auto it = m.find(k);
    return it == m.end() ? typename Map::mapped_type{} : it->second;
  }
  std::map<std::string, std::map<std::string, GemmCell>> gemm_;
  std::map<std::string, double> peak_by_;
  std::vector<std::string> gemm_order_;
  double peak_ = 0;
};

// --blas_threads=N (removed from argv before Google Benchmark parses it) or DDP_BLAS_THREADS.
void apply_blas_threads(int* argc, char** argv) {
  int threads = 0;
  if (const char* env = std::getenv("DDP_BLAS_THREADS")) threads = std::atoi(env);
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    if (std::strncmp(argv[i], "--blas_threads=", 15) == 0)
      threads = std::atoi(argv[i] + 15);
    else
      argv[out++] = argv[i];
  }
  *argc = out;
  if (threads > 0) kernels::cpu::set_thread_budget(threads);
  std::printf("GEMM threads: %d (%s); thread budget %d (Kernel_VsCopy sets its own)\n", kernels::cpu::blas_threads(),
              kernels::cpu::gemm_libraries().c_str(), kernels::cpu::thread_budget());
}
}  // namespace

int main(int argc, char** argv) {
  apply_blas_threads(&argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  benchmark::Shutdown();
  return 0;
}

// parallel.h - the rank's CPU thread budget, shared by OpenBLAS and the intra-op thread pool that splits the
// large non-BLAS kernels (elementwise, row-wise, column sums) and the blocks of float products (gemm.cpp)
// across that budget.
//
// One budget per process. set_thread_budget(n) gives OpenBLAS n threads and the pool n - 1 workers (the
// calling thread is the n-th). Never set, the budget follows OpenBLAS's own thread count
// (OPENBLAS_NUM_THREADS; ddprun sets it to 1 when several ranks share a host), so a 1-thread rank starts no
// pool thread at all. BLAS and pool work never overlap: both are entered from the rank's compute thread and
// return only when their work is done. After a job a worker spins for kPoolSpinMicros, so the next job of a
// training step (tens of microseconds later) finds it awake, then sleeps on a condition variable; a
// multi-threaded library call (OpenBLAS, or oneDNN's OpenMP team when forced) first calls
// park_pool_workers(), which sends spinning workers to sleep at once, so the cores are the library's while it
// runs. Debian's OpenBLAS is the pthread flavour; oneDNN's GEMM (gemm_onednn.cpp) runs OpenMP threads sized
// by blas_threads(), which set_thread_budget sets. At a budget above 1 most float products run as blocks on
// this pool (gemm.cpp), each a 1-thread library call.
//
// Determinism: parallel_for hands out contiguous ranges whose boundaries are multiples of `align`; for
// elementwise kernels any split gives bitwise-identical results. Reductions must not depend on the split:
// they sum fixed blocks (sizes independent of the thread count) and combine the block results in order.
// A call made while the pool is busy (another thread's kernel, or from inside a task) runs serially.
#pragma once
#include <cstdint>
#include <type_traits>

namespace ddp::kernels::cpu {

// The rank's threads for compute: OpenBLAS threads and pool threads (pool workers + the caller). n >= 1.
void set_thread_budget(int n);
// The budget now (set_thread_budget's value, else OpenBLAS's thread count).
int thread_budget();
// Pool worker threads started so far in this process (tests: a budget of 1 starts none).
int pool_threads_started();

// An op is split only when every thread gets at least this many elements (of one pass over memory): the
// pool's wake-up (a futex wake and a context switch, 5-20 us on this VM) must be small against the work
// saved. bench_micro_ops Kernel_Threads times every kernel with 1 and 2 threads at 16K-16M elements (the
// split forced). kParallelMinElements is for the compute-heavy kernels (transcendentals, softmax, layer
// norm): on the loaded 2-core development VM (2026-12-01) the second thread gave nothing at any size (the
// other core was busy), so this value (64K: gelu ~15 us, relu ~3 us per thread) is a conservative pick to
// re-measure on a quiet machine (docs/benchmarks.md).
constexpr int64_t kParallelMinElements = 1 << 16;
// Memory-bound streaming kernels (optimizer steps, dropout, column sums: a few flops per byte): in cache
// the second thread adds no bandwidth on this VM and costs its wake-up (quiet run of 2026-12-01: the
// momentum SGD step, the column sums and memcpy were slower with 2 threads at 1M elements); out of the
// last-level cache it pays (16M elements: column sums 2.2x, dropout 1.5x). Split from 1M elements per thread.
constexpr int64_t kParallelMinStreaming = 1 << 20;

// How long a pool worker keeps polling for the next job before it sleeps, and how long the caller of a job,
// its own range done, polls for the workers' ranges before it sleeps. Measured on the default gpt's
// compute-only step at world 1 with 2 threads (2026-12-04, AMD EPYC Zen 5 guest, the vCPUs on one cache, its
// products as blocks on the pool; docs/benchmarks.md, "Several threads in one rank"): workers that sleep at
// once 8.96-9.08 ms, polling 20 us 7.94-8.08, 50 us 7.72-7.77, 100 us 7.65-7.71, 300 us 7.61-9.83; then the
// caller's poll (before it, a short job ended in a futex wake-up of the caller): 7.73-7.81 -> 7.34-7.53 ms,
// the mlp 1.77-1.82 -> 1.68-1.73, and bench_micro_ops Kernel_Threads' second-thread speedup at 16K elements
// 0.10-0.17 -> 1.13-1.17. It costs the rank's own idle cores only: a rank with a budget of 1 starts no
// worker.
constexpr int kPoolSpinMicros = 100;
// Sends the pool's spinning workers to sleep now (the next job wakes them): called before a library call
// that runs threads of its own on the rank's cores. Cheap (one atomic increment); a no-op without workers.
void park_pool_workers();

// Benchmarks only (bench_micro_ops Kernel_Threads): while true, every parallel_for splits whenever it has two
// aligned items, whatever min_per_thread says, so the second thread's effect can be timed at any size.
void set_parallel_split_always(bool on);
// Benchmarks only: the pool's share of the budget (parallel_for's thread count) set to n, OpenBLAS's thread
// count left as it is. set_thread_budget calls openblas_set_num_threads, far too slow (and disturbing: it
// starts or parks OpenBLAS's threads) to call between two timed runs of a kernel.
void set_pool_budget_only(int n);

namespace detail {
using RangeFn = void (*)(void* ctx, int64_t begin, int64_t end);
void parallel_run(int64_t n, int64_t align, int64_t min_per_thread, RangeFn fn, void* ctx);
}  // namespace detail

// Calls body(begin, end) over disjoint ranges covering [0, n), on up to thread_budget() threads; a range has
// at least min_per_thread items, and every boundary is a multiple of align. Serially: body(0, n).
template <class F>
void parallel_for(int64_t n, int64_t align, int64_t min_per_thread, F&& body) {
  using Body = std::remove_reference_t<F>;
  auto call = [](void* ctx, int64_t b, int64_t e) { (*static_cast<Body*>(ctx))(b, e); };
  detail::parallel_run(n, align, min_per_thread, call, const_cast<void*>(static_cast<const void*>(&body)));
}

}  // namespace ddp::kernels::cpu

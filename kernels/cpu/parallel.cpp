// parallel.cpp - the intra-op thread pool behind parallel_for (kernels/cpu/parallel.h): workers started
// lazily up to budget - 1, each taking one contiguous range of a job; between jobs a worker polls for the
// next for kPoolSpinMicros (unless parked), then sleeps on a condition variable; the caller takes the first
// range and then waits for the others (polling for up to kPoolSpinMicros, then sleeping).
#include "kernels/cpu/parallel.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "runtime/core/error.h"

namespace ddp::kernels::cpu {
namespace {

thread_local bool t_in_pool_task = false;

class Pool {
 public:
  // Runs fn over `tasks` ranges given by bounds (tasks + 1 entries); false when the pool is busy. Tasks are
  // claimed under the mutex, so a worker that wakes late can only ever take a task of the current job.
  bool run(int tasks, const int64_t* bounds, detail::RangeFn fn, void* ctx) {
    bool expected = false;
    if (!busy_.compare_exchange_strong(expected, true, std::memory_order_acquire)) return false;
    ensure_workers(tasks - 1);
    std::unique_lock<std::mutex> lock(mu_);
    fn_ = fn;
    ctx_ = ctx;
    bounds_ = bounds;
    tasks_ = tasks;
    next_ = 1;  // the caller runs range 0
    pending_ = tasks;
    ++generation_;
    posted_.store(generation_, std::memory_order_release);
    lock.unlock();
    cv_work_.notify_all();
    run_range(0);
    lock.lock();
    --pending_;
    while (next_ < tasks_) {  // help with ranges no worker has taken yet
      const int t = next_++;
      lock.unlock();
      run_range(t);
      lock.lock();
      --pending_;
    }
    if (pending_ > 0) wait_briefly_for_workers(lock);
    cv_done_.wait(lock, [&] { return pending_ == 0; });
    lock.unlock();
    busy_.store(false, std::memory_order_release);
    return true;
  }
  int started() const { return started_.load(); }
  void park() { park_epoch_.fetch_add(1, std::memory_order_release); }

 private:
  void run_range(int t) {
    t_in_pool_task = true;
    fn_(ctx_, bounds_[t], bounds_[t + 1]);
    t_in_pool_task = false;
  }
  void ensure_workers(int wanted) {
    while (started_.load() < wanted) {
      std::thread([this] { worker(); }).detach();  // the pool lives until exit; workers sleep when idle
      started_.fetch_add(1);
    }
  }
  void worker() {
    std::unique_lock<std::mutex> lock(mu_);
    uint64_t seen = generation_;
    // park() calls up to the start of the last job: a later one (a library call after that job) ends the
    // spin, even one made before this worker reaches spin_for_next.
    uint64_t parks = park_epoch_.load(std::memory_order_acquire);
    while (true) {
      if (generation_ == seen) spin_for_next(lock, seen, parks);
      cv_work_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      parks = park_epoch_.load(std::memory_order_acquire);
      while (next_ < tasks_) {
        const int t = next_++;
        lock.unlock();
        run_range(t);
        lock.lock();
        if (--pending_ == 0) cv_done_.notify_one();
      }
    }
  }

  // The caller, its ranges done: polls for up to kPoolSpinMicros until the workers have finished theirs, so a
  // short job does not end in a futex wake-up of the caller (5-20 us here).
  void wait_briefly_for_workers(std::unique_lock<std::mutex>& lock) {
    poll_unlocked(lock, [&] { return pending_.load(std::memory_order_acquire) > 0; });
  }
  // Polls until job `seen` is followed by another, park() has been called since `epoch`, or kPoolSpinMicros
  // pass.
  void spin_for_next(std::unique_lock<std::mutex>& lock, uint64_t seen, uint64_t epoch) {
    poll_unlocked(lock, [&] {
      return posted_.load(std::memory_order_acquire) == seen &&
             park_epoch_.load(std::memory_order_acquire) == epoch;
    });
  }
  // With the mutex released: polls while `keep_polling()` holds, for at most kPoolSpinMicros.
  template <class Pred>
  static void poll_unlocked(std::unique_lock<std::mutex>& lock, Pred keep_polling) {
    lock.unlock();
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kPoolSpinMicros);
    while (keep_polling()) {
#if defined(__x86_64__) || defined(__i386__)
      for (int i = 0; i < 16; ++i) __builtin_ia32_pause();
#endif
      if (std::chrono::steady_clock::now() > until) break;
    }
    lock.lock();
  }

  std::atomic<bool> busy_{false};
  std::atomic<int> started_{0};
  std::atomic<uint64_t> posted_{0};      // generation_, readable without the mutex (the spinning workers)
  std::atomic<uint64_t> park_epoch_{0};  // park() calls so far
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  // Guarded by mu_:
  uint64_t generation_ = 0;
  detail::RangeFn fn_ = nullptr;
  void* ctx_ = nullptr;
  const int64_t* bounds_ = nullptr;
  int tasks_ = 0, next_ = 0;
  std::atomic<int> pending_{0};  // written under mu_; read without it by the caller's brief wait
};

// Never destroyed (workers are detached and may be asleep at exit). A forked child has none of the parent's
// threads: it gets a fresh pool (the parent's object is abandoned in the child).
Pool* g_pool = nullptr;
std::atomic<Pool*> g_pool_to_park{nullptr};  // g_pool for park_pool_workers(), which must not create it
std::once_flag g_atfork_once;
std::atomic<int> g_budget{0};  // 0: follow OpenBLAS
std::atomic<bool> g_split_always{false};

Pool& pool() {
  std::call_once(g_atfork_once, [] {
    g_pool = new Pool();
    g_pool_to_park.store(g_pool, std::memory_order_release);
    pthread_atfork(nullptr, nullptr, [] {
      g_pool = new Pool();
      g_pool_to_park.store(g_pool, std::memory_order_release);
    });
  });
  return *g_pool;
}
}  // namespace

void set_thread_budget(int n) {
  DDP_CHECK(n >= 1, "set_thread_budget: ", n, " threads requested; give at least 1");
  set_blas_threads(n);
  g_budget.store(n);
}

int thread_budget() {
  const int b = g_budget.load(std::memory_order_relaxed);
  return b > 0 ? b : std::max(1, blas_threads());
}

int pool_threads_started() { return pool().started(); }

void park_pool_workers() {
  if (Pool* p = g_pool_to_park.load(std::memory_order_acquire)) p->park();
}

void set_parallel_split_always(bool on) { g_split_always.store(on); }

void set_pool_budget_only(int n) {
  DDP_CHECK(n >= 1, "set_pool_budget_only: ", n, " threads requested; give at least 1");
  g_budget.store(n);
}

namespace detail {
void parallel_run(int64_t n, int64_t align, int64_t min_per_thread, RangeFn fn, void* ctx) {
  if (n <= 0) return;
  const int64_t per = g_split_always.load(std::memory_order_relaxed)
                          ? std::max<int64_t>(align, 1)
                          : std::max<int64_t>({min_per_thread, align, 1});
  int threads = static_cast<int>(std::min<int64_t>(thread_budget(), n / per));
  if (threads <= 1 || t_in_pool_task) {
    fn(ctx, 0, n);
    return;
  }
  threads = std::min(threads, 64);
  int64_t bounds[65];
  const int64_t units = (n + align - 1) / align;  // split in whole multiples of align
  for (int t = 0; t <= threads; ++t) bounds[t] = std::min(n, (units * t / threads) * align);
  if (!pool().run(threads, bounds, fn, ctx)) fn(ctx, 0, n);
}
}  // namespace detail

}  // namespace ddp::kernels::cpu

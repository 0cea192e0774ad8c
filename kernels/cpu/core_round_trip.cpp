// core_round_trip.cpp - the ping-pong of core_round_trip.h: one 64-byte-aligned atomic counter; the first
// thread writes odd values and waits for the next even one, the second answers each odd value with the next
// even one. Both spin (a round trip is ~100 ns: any sleep would measure the scheduler) but yield after long
// waits, so a stalled peer cannot hang the probe, and a deadline ends it early.
#include "kernels/cpu/core_round_trip.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace ddp::kernels::cpu {
namespace {
using Clock = std::chrono::steady_clock;

bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// Spins until counter == want (true) or `stop` is set (false).
bool wait_for(const std::atomic<long>& counter, long want, const std::atomic<bool>& stop) {
  for (long spins = 0; counter.load(std::memory_order_acquire) != want; ++spins) {
    if (stop.load(std::memory_order_relaxed)) return false;
    if (spins > (1 << 16)) std::this_thread::yield();
  }
  return true;
}

// One measurement: ns per round trip, or -1.
double one_measurement(int a, int b, int rounds, double max_seconds) {
  struct alignas(64) Line {
    std::atomic<long> counter{0};
  } line;
  std::atomic<bool> stop{false}, pinned_b{false}, ready_b{false};
  std::thread peer([&] {
    pinned_b = pin_to(b);
    ready_b = true;
    if (!pinned_b) return;
    for (long i = 0; i < rounds; ++i) {
      if (!wait_for(line.counter, 2 * i + 1, stop)) return;
      line.counter.store(2 * i + 2, std::memory_order_release);
    }
  });
  cpu_set_t saved;
  const bool have_saved = pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved) == 0;
  const bool pinned_a = pin_to(a);
  while (!ready_b.load()) std::this_thread::yield();
  double ns = -1;
  if (pinned_a && pinned_b) {
    const auto t0 = Clock::now();
    const auto deadline = t0 + std::chrono::duration<double>(max_seconds);
    long done = 0;
    for (long i = 0; i < rounds; ++i) {
      line.counter.store(2 * i + 1, std::memory_order_release);
      if (!wait_for(line.counter, 2 * i + 2, stop)) break;
      done = i + 1;
      if ((i & 63) == 63 && Clock::now() > deadline) break;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (done > 0) ns = seconds / static_cast<double>(done) * 1e9;
  }
  stop = true;
  peer.join();
  if (have_saved) pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
  return ns;
}
}  // namespace

void round_trip_cpus(int* first, int* second) {
  *first = *second = -1;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed)) continue;
    if (*first < 0) {
      *first = c;
    } else {
      *second = c;
      return;
    }
  }
  *first = -1;  // only one CPU
}

double measure_core_round_trip_ns(int rounds, int repeats, double max_seconds) {
  int a = -1, b = -1;
  round_trip_cpus(&a, &b);
  if (a < 0 || b < 0 || rounds < 1) return -1;
  double best = -1;
  for (int r = 0; r < std::max(repeats, 1); ++r) {
    const double ns = one_measurement(a, b, rounds, max_seconds);
    if (ns < 0) return -1;
    best = best < 0 ? ns : std::min(best, ns);
  }
  return best;
}
}  // namespace ddp::kernels::cpu

// shm_sync.cpp - futex wake/sleep on a peer's progress word with a bounded spin and liveness checks.
#include "runtime/distributed/shm/shm_sync.h"

#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/core/env_number.h"
#include "runtime/core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DDP_SHM_PAUSE() _mm_pause()
#else
#define DDP_SHM_PAUSE() ((void)0)
#endif

namespace ddp::dist::shm {

// Shared (not PRIVATE) futex operations: the word lives in memory mapped by several processes.
void futex_wait_shared(std::atomic<uint32_t>* addr, uint32_t expected, std::chrono::nanoseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT, expected, &ts, nullptr, 0);
}
void futex_wake_shared(std::atomic<uint32_t>* addr) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

bool pid_alive(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  // A killed process stays a zombie until its parent reaps it: read its state from /proc.
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (!f) return true;  // no /proc: trust kill()
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');
  return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

bool pid_exists(pid_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

void publish_progress(ControlBlock& cb, uint32_t value) {
  cb.progress.store(value, std::memory_order_seq_cst);
  if (cb.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_shared(&cb.progress);
}

void publish_state(ControlBlock& cb, PeerState s, const std::string& why) {
  if (s == PeerState::Failed) {
    const size_t n = std::min(why.size(), sizeof(cb.failure) - 1);
    std::memcpy(cb.failure, why.data(), n);
    cb.failure[n] = '\0';
  }
  cb.state.store(static_cast<uint32_t>(s), std::memory_order_seq_cst);
  // Bump nothing: sleepers wake on the futex and re-check the state.
  futex_wake_shared(&cb.progress);
}

namespace {
void microseconds_from_env(const char* name, std::chrono::microseconds& out) {
  if (auto us =
          integer_from_env(name, 0, 1'000'000, "microseconds of spinning before sleeping, 0 to 1000000"))
    out = std::chrono::microseconds(*us);
}
}  // namespace

WaitPolicy wait_policy_from_env() {
  WaitPolicy p;
  microseconds_from_env("DDP_SHM_SPIN_US", p.spin);
  microseconds_from_env("DDP_SHM_WAITED_SPIN_US", p.waited_spin);
  return p;
}

WaitEnd wait_progress(ControlBlock& peer, uint32_t target, std::chrono::steady_clock::time_point deadline,
                      const WaitPolicy& policy, bool same_process, const std::atomic<int>* waiters,
                      const std::atomic<bool>* aborted) {
  auto is_aborted = [&] { return aborted && aborted->load(std::memory_order_acquire); };
  using Clock = std::chrono::steady_clock;
  if (reached(peer.progress.load(std::memory_order_acquire), target)) return WaitEnd::Reached;
  // Bounded spin: the peer is usually a few microseconds away. Its length follows whether a caller blocks
  // (re-read as it goes: a caller may start waiting meanwhile).
  auto budget = [&] {
    return waiters && waiters->load(std::memory_order_relaxed) > 0 ? policy.waited_spin : policy.spin;
  };
  if (budget().count() > 0) {
    const auto spin_start = Clock::now();
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (reached(peer.progress.load(std::memory_order_acquire), target)) return WaitEnd::Reached;
        DDP_SHM_PAUSE();
      }
      const auto spun = Clock::now() - spin_start;
      if (spun >= budget()) break;
      // Past the short spin, let whatever else is runnable on this core go first (the peer itself, on a
      // machine with more threads than cores); costs a system call when nothing is.
      if (spun >= policy.spin) ::sched_yield();
    }
  }
  for (;;) {
    peer.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = peer.progress.load(std::memory_order_seq_cst);
    const auto state = static_cast<PeerState>(peer.state.load(std::memory_order_seq_cst));
    if (!reached(seen, target) && state == PeerState::Alive && !is_aborted()) {
      const auto now = Clock::now();
      if (now < deadline) {
        auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
        futex_wait_shared(&peer.progress, seen, std::min<std::chrono::nanoseconds>(left, policy.slice));
      }
    }
    peer.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(peer.progress.load(std::memory_order_acquire), target)) return WaitEnd::Reached;
    if (is_aborted()) return WaitEnd::Aborted;
    switch (static_cast<PeerState>(peer.state.load(std::memory_order_acquire))) {
      case PeerState::Closed:
        return WaitEnd::PeerClosed;
      case PeerState::Failed:
        return WaitEnd::PeerFailed;
      case PeerState::Alive:
        break;
    }
    if (!same_process && !pid_alive(peer.pid)) {
      // It may have published its last step just before exiting.
      if (reached(peer.progress.load(std::memory_order_acquire), target)) return WaitEnd::Reached;
      return WaitEnd::PeerDied;
    }
    if (Clock::now() >= deadline) return WaitEnd::Deadline;
  }
}

}  // namespace ddp::dist::shm

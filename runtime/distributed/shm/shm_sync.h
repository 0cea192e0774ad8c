// shm_sync.h - the control block at the head of each rank's shared-memory segment and the waiting on it.
//
// Each rank owns one monotonically increasing 32-bit `progress` word (steps of a collective advance it in
// phases). A rank that needs a peer's data waits until the peer's progress reaches a target: a bounded
// spin, then futex sleeps in slices, between which it checks the peer's liveness (pid), the peer's failure
// flag and the collective's deadline. The spin is short (each rank here may own a single core, so a long spin
// would steal it from the computation) unless a caller of this rank is blocked waiting for the collective:
// then the core has nothing else to do, and spinning saves the futex wake-up (50-100 us on a virtual
// machine). An abort flag of the waiting rank (ProcessGroup::abort) is checked between slices too: an aborted
// wait ends within one slice (at once when the aborting thread also wakes the futex). Writers wake the futex
// only when someone sleeps on it (a waiter count), so a step with no sleeper costs no system call.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace ddp::dist::shm {

inline constexpr uint64_t kMagic = 0x6464707368'6d3033ull;  // "ddpshm03"

// What a rank is doing, so peers can check that they run the same collective (cheap, always on).
struct CallStamp {
  std::atomic<uint64_t> seq{~0ull};  // ~0: being written
  std::atomic<uint64_t> shape{0};    // kind | dtype << 8 | op << 16 | (root + 1) << 24
  std::atomic<int64_t> count{0};
  // All-reduce of a registered buffer (ShmProcessGroup::allocate_comm_buffer): its index + 1 and the byte
  // offset of the data in it; 0: not a candidate for the in-place path.
  std::atomic<uint64_t> direct_buffer{0};
  std::atomic<uint64_t> direct_offset{0};
};

enum class PeerState : uint32_t { Alive = 0, Closed = 1, Failed = 2 };

struct alignas(64) ControlBlock {
  uint64_t magic;
  int32_t pid;
  uint32_t slot_bytes;
  alignas(64) std::atomic<uint32_t> progress;  // the futex word
  std::atomic<uint32_t> sleepers;              // peers sleeping on `progress`
  alignas(64) std::atomic<uint64_t> arrived;   // 1 + the last collective sequence number reached; 0: none
  std::atomic<uint32_t> state;                 // PeerState
  CallStamp call[2];  // by sequence-number parity
  char failure[256];  // why this rank failed (state == Failed)
  // Rank 0's decide every collective's outcome (shm_verdict.h), by sequence-number parity.
  alignas(64) std::atomic<uint32_t> verdict[2];
  std::atomic<uint32_t> verdict_sleepers;  // ranks sleeping on a verdict word
};

inline constexpr size_t kControlBytes = 4096;
static_assert(sizeof(ControlBlock) <= kControlBytes);

// Futex sleep on a 32-bit word of a shared segment while it holds `expected` (at most `timeout`), and the wake of
// everyone sleeping on it.
void futex_wait_shared(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout);
void futex_wake_shared(std::atomic<uint32_t>* word);

// Publishes a new progress value and wakes sleepers.
void publish_progress(ControlBlock& cb, uint32_t value);
// Marks the rank closed/failed and wakes everyone sleeping on it.
void publish_state(ControlBlock& cb, PeerState s, const std::string& why = "");

// True when progress has reached target (wrap-around safe).
inline bool reached(uint32_t progress, uint32_t target) {
  return static_cast<int32_t>(progress - target) >= 0;
}

// Why a wait ended without the peer reaching the target.
enum class WaitEnd { Reached, Deadline, PeerDied, PeerClosed, PeerFailed, Aborted };

struct WaitPolicy {
  std::chrono::microseconds spin{20};          // DDP_SHM_SPIN_US: while the caller computes
  std::chrono::microseconds waited_spin{300};  // DDP_SHM_WAITED_SPIN_US: while a caller blocks in wait()
  std::chrono::milliseconds slice{20};         // futex sleep between liveness checks
};
WaitPolicy wait_policy_from_env();

// Waits until peer.progress reaches target, or one of the other endings. `same_process` skips the pid check
// (thread ranks share the pid). `waiters` (may be null): how many callers block on this rank's collectives;
// while it is > 0 the spin lasts policy.waited_spin instead of policy.spin. `aborted` (may be null): set by
// this rank's abort(); the wait then ends with WaitEnd::Aborted.
WaitEnd wait_progress(ControlBlock& peer, uint32_t target, std::chrono::steady_clock::time_point deadline,
                      const WaitPolicy& policy, bool same_process, const std::atomic<int>* waiters = nullptr,
                      const std::atomic<bool>* aborted = nullptr);

// Whether process `pid` runs: false once it exited, a zombie included (a peer that died is gone for a
// collective).
bool pid_alive(pid_t pid);
// Whether `pid` exists at all: a zombie does (its parent has not reaped it yet, and may still clean up after
// it).
bool pid_exists(pid_t pid);

}  // namespace ddp::dist::shm

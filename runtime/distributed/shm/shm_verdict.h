// shm_verdict.h - one outcome of each shm collective on every rank: the shared word that decides whether it
// completed or failed.
//
// The lock-step marks (shm_sync.h) tell a rank when it may read or reuse a peer's slot; they do not make the
// ranks agree on the outcome. A rank that gives up (timeout, a mismatch) after publishing its part, and a late
// peer that then finds every mark it needs, would otherwise report a failure and a success for the same
// collective. So each collective ends with a vote on one 32-bit word of rank 0's control block (by
// sequence-number parity): a rank that finished its part adds itself to the count, a rank that gives up sets
// the failed flag with its rank number instead - each by compare-and-swap, so whichever comes first decides:
// the count reaching the world size (completed) or the flag (failed). Nobody completes a collective another
// rank failed; nobody fails one every rank completed.
//
// The word: bits 12-31 the sequence number (mod 2^20; a word holding another number is a fresh one - the word
// of parity p is reused two collectives later, when every rank has left the earlier one), bit 11 failed, bits
// 0-10 the count of completed votes, or the rank that failed it.
#pragma once
#include <cstdint>

#include "runtime/distributed/shm/shm_sync.h"

namespace ddp::dist::shm {

inline constexpr int kMaxVerdictWorld = 2047;  // ranks countable in the word's 11 bits

enum class Verdict { Pending, Completed, Failed };

struct VerdictState {
  Verdict verdict = Verdict::Pending;
  int failed_by = -1;  // the rank that failed the collective (Verdict::Failed)
  uint32_t word = 0;   // the word this was read from (what wait_verdict_change waits to change)
};

// The decision on collective `seq` as the word shows it now.
VerdictState read_verdict(const ControlBlock& rank0, uint64_t seq, int world);
// This rank finished its part of `seq`: counts it. Completed when it was the last, Failed when some rank
// failed `seq` first, else Pending.
VerdictState vote_completed(ControlBlock& rank0, uint64_t seq, int world);
// This rank gives up on `seq`: Failed (by `rank`, or by whoever failed it before), or Completed when every
// rank had already voted completed (the collective did complete; the caller must not report a failure).
VerdictState vote_failed(ControlBlock& rank0, uint64_t seq, int world, int rank);
// Spins (for `spin`), then sleeps for at most `slice`, until the word of `seq` no longer holds `seen` (the
// word of the caller's last VerdictState: a change between that read and this call is not missed). The
// caller re-reads the verdict and checks its peers between calls.
void wait_verdict_change(ControlBlock& rank0, uint64_t seq, uint32_t seen, std::chrono::microseconds spin,
                         std::chrono::milliseconds slice);

}  // namespace ddp::dist::shm

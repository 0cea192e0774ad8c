// shm_verdict.cpp - the compare-and-swap vote that decides each shm collective's outcome (shm_verdict.h).
#include "runtime/distributed/shm/shm_verdict.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DDP_VERDICT_PAUSE() _mm_pause()
#else
#define DDP_VERDICT_PAUSE() ((void)0)
#endif

namespace ddp::dist::shm {

namespace {
constexpr uint32_t kFailedBit = 1u << 11;
constexpr uint32_t kLowMask = (1u << 11) - 1;

uint32_t seq_bits(uint64_t seq) { return static_cast<uint32_t>(seq & 0xFFFFF) << 12; }
std::atomic<uint32_t>& word_of(ControlBlock& rank0, uint64_t seq) { return rank0.verdict[seq % 2]; }

VerdictState decode(uint32_t w, uint64_t seq, int world) {
  if ((w & ~(kFailedBit | kLowMask)) != seq_bits(seq))  // still the word of an earlier collective
    return {Verdict::Pending, -1, w};
  if (w & kFailedBit) return {Verdict::Failed, static_cast<int>(w & kLowMask), w};
  return {static_cast<int>(w & kLowMask) >= world ? Verdict::Completed : Verdict::Pending, -1, w};
}

void wake(ControlBlock& rank0, uint64_t seq) {
  if (rank0.verdict_sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_shared(&word_of(rank0, seq));
}
}  // namespace

VerdictState read_verdict(const ControlBlock& rank0, uint64_t seq, int world) {
  return decode(rank0.verdict[seq % 2].load(std::memory_order_acquire), seq, world);
}

VerdictState vote_completed(ControlBlock& rank0, uint64_t seq, int world) {
  auto& word = word_of(rank0, seq);
  uint32_t w = word.load(std::memory_order_acquire);
  for (;;) {
    const bool fresh = (w & ~(kFailedBit | kLowMask)) != seq_bits(seq);  // nobody voted on seq yet
    if (!fresh && (w & kFailedBit)) return decode(w, seq, world);
    const uint32_t next = seq_bits(seq) | (fresh ? 1 : (w & kLowMask) + 1);
    if (word.compare_exchange_weak(w, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
      const VerdictState after = decode(next, seq, world);
      if (after.verdict == Verdict::Completed) wake(rank0, seq);
      return after;
    }
  }
}

VerdictState vote_failed(ControlBlock& rank0, uint64_t seq, int world, int rank) {
  auto& word = word_of(rank0, seq);
  uint32_t w = word.load(std::memory_order_acquire);
  for (;;) {
    const VerdictState now = decode(w, seq, world);
    if (now.verdict != Verdict::Pending) return now;
    const uint32_t next = seq_bits(seq) | kFailedBit | (static_cast<uint32_t>(rank) & kLowMask);
    if (word.compare_exchange_weak(w, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
      wake(rank0, seq);
      return {Verdict::Failed, rank, next};
    }
  }
}

void wait_verdict_change(ControlBlock& rank0, uint64_t seq, uint32_t seen, std::chrono::microseconds spin,
                         std::chrono::milliseconds slice) {
  using Clock = std::chrono::steady_clock;
  auto& word = word_of(rank0, seq);
  if (spin.count() > 0) {
    const auto start = Clock::now();
    do {
      for (int i = 0; i < 64; ++i) {
        if (word.load(std::memory_order_acquire) != seen) return;
        DDP_VERDICT_PAUSE();
      }
    } while (Clock::now() - start < spin);
  }
  rank0.verdict_sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (word.load(std::memory_order_seq_cst) == seen) futex_wait_shared(&word, seen, slice);
  rank0.verdict_sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace ddp::dist::shm

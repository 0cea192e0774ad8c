// index_check.h - the index tests of embedding and cross_entropy, shared by the CPU kernels, the CUDA kernels
// (nvcc compiles these as __host__ __device__) and the CPU tests of both: which index is out of range, what
// a kernel does with such an index (it never reads or writes through it), and how a device-side check keeps
// the first bad position.
//
// A device-side check reports through a 64-bit slot that starts at kNoBadPosition (all bits set); every
// thread that sees a bad index at flat position p does slot = min(slot, p) (atomicMin on the GPU,
// keep_first_bad on the host), so after the kernel the slot holds the smallest bad position - the same one
// the CPU's first-to-last scan finds - or kNoBadPosition.
#pragma once
#include <cstdint>

#include "kernels/cpu/host_device.h"

namespace ddp::kernels::cpu {

constexpr unsigned long long kNoBadPosition = ~0ull;

// An embedding index (or a class index) that may be read through: 0 <= index < bound.
DDP_HOST_DEVICE inline bool index_in_range(int64_t index, int64_t bound) {
  return index >= 0 && index < bound;
}
// A cross-entropy target that is an error: outside [0, classes) and not the ignore index.
DDP_HOST_DEVICE inline bool target_is_bad(int64_t target, int64_t classes, bool has_ignore,
                                                      int64_t ignore_index) {
  return !index_in_range(target, classes) && !(has_ignore && target == ignore_index);
}
// The slot's value after a thread reports `position` (what atomicMin does; first error wins).
DDP_HOST_DEVICE inline unsigned long long keep_first_bad(unsigned long long slot,
                                                                     unsigned long long position) {
  return position < slot ? position : slot;
}
// The sort key of index `index` in the deterministic embedding backward: itself when valid, else `vocab`,
// one past the last row, which the segment sums skip (so a bad index adds to no row).
DDP_HOST_DEVICE inline uint32_t embedding_sort_key(int64_t index, int64_t vocab) {
  return static_cast<uint32_t>(index_in_range(index, vocab) ? index : vocab);
}
// Radix-sort bits that hold every key 0..vocab (the bad-index key included): the smallest b >= 1 with
// 2^b > vocab, at most 32 (the kernel takes at most 2^32 - 1 rows).
DDP_HOST_DEVICE inline int embedding_sort_bits(int64_t vocab) {
  int bits = 1;
  while (bits < 32 && (int64_t(1) << bits) <= vocab) ++bits;
  return bits;
}

}  // namespace ddp::kernels::cpu

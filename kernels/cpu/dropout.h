// dropout.h - the counter-based dropout mask shared by the CPU and CUDA kernels, and the CPU kernel.
//
// Element i of a call with (seed, offset) is kept when  mix64(key(seed) + (offset + i + 1) * kGolden) >=
// threshold, where mix64 is the splitmix64 output function and threshold = p * 2^64. The mask is a pure
// function of (seed, offset + i): no generator state, so the CPU, every CUDA grid shape and the backward pass
// (which recomputes the mask instead of saving it) all see the same mask. Only 64-bit integer arithmetic is
// involved, so the CPU and GPU agree bit for bit.
#pragma once
#include <cstdint>

#include "kernels/cpu/host_device.h"

namespace ddp::kernels::cpu {

constexpr uint64_t kDropoutGolden = 0x9E3779B97F4A7C15ull;

DDP_HOST_DEVICE inline uint64_t dropout_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// The per-call key derived from the user's seed (one mixing round, so nearby seeds give unrelated masks).
DDP_HOST_DEVICE inline uint64_t dropout_key(uint64_t seed) {
  return dropout_mix64(seed + kDropoutGolden);
}
// True when the element with global counter `counter` is kept.
DDP_HOST_DEVICE inline bool dropout_keep(uint64_t key, uint64_t counter, uint64_t threshold) {
  return dropout_mix64(key + (counter + 1) * kDropoutGolden) >= threshold;
}

// The drop threshold p * 2^64 for p in [0, 1); p >= 1 gives the maximum (pair it with scale 0 to drop all).
inline uint64_t dropout_threshold(double p) {
  if (p <= 0) return 0;
  if (p >= 1) return UINT64_MAX;
  return static_cast<uint64_t>(p * 18446744073709551616.0);  // p < 1 in double keeps this below 2^64
}

// y[i] = keep(i) ? x[i] * scale : 0, with counters offset + i.  x, y: (n); y may alias x.
// Forward uses x; backward calls it again with dy for x and the same (key, offset) to get dx.
template <class T>
void dropout_apply(const T* x, T* y, int64_t n, uint64_t key, uint64_t offset, uint64_t threshold, T scale);

}  // namespace ddp::kernels::cpu

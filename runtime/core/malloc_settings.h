// malloc_settings.h - glibc malloc settings for a steady-state training step with no page faults.
// OpenBLAS 0.3.21 mallocs a 512 KiB work buffer inside every sgemm call and frees it at the end. glibc serves
// blocks above its mmap threshold (128 KiB at start, raised dynamically only when such a block is freed
// early) with a fresh mmap, so every GEMM faulted in 128 new pages - how many depended on what the program
// happened to free first. Loading libddp fixes the threshold at kMmapThresholdBytes and the trim threshold at
// kTrimThresholdBytes, so these buffers are reused from the heap. A user's own setting wins: with
// MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or a glibc.malloc tunable in GLIBC_TUNABLES set, nothing is
// changed.
#pragma once
#include <cstddef>

namespace ddp {

inline constexpr size_t kMmapThresholdBytes = size_t{32} << 20;
inline constexpr size_t kTrimThresholdBytes = size_t{128} << 20;

// What load-time set-up did: "applied", "left to the user's environment (...)" or "not glibc".
const char* malloc_settings_state();

}  // namespace ddp

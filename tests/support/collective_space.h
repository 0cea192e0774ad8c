// collective_space.h - what the seeded differential tests of the collectives share (tests/distributed/
// test_collectives_space.cpp on the CPU backends, tests/gpu/test_gpu_collectives_space.cpp on NCCL and the
// Gloo-staged CUDA path): the element counts where the algorithms split their work, seeded inputs every rank
// can recompute for every other rank, and the reference reduction with the tolerance of each dtype.
#pragma once
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/distributed/process_group.h"

namespace ddp::testing {

inline constexpr size_t kSmallAllreduceBytes = 32 << 10;        // shm: below, every rank reduces it all
inline constexpr size_t kDirectBytes = kSmallAllreduceBytes + 1;  // shm: registered buffers in place from here
inline constexpr size_t kMaxSpaceBytes = 3 << 20;               // the largest count on shm: "a few MiB"

inline constexpr DType kSpaceDtypes[] = {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64};
inline constexpr dist::ReduceOp kSpaceOps[] = {dist::ReduceOp::Sum, dist::ReduceOp::Avg, dist::ReduceOp::Max,
                                               dist::ReduceOp::Min};

// DDP_TEST_SEED, or the fixed default: every failure message names it, so a run can be replayed.
uint64_t space_seed();

// The element counts where a collective of `world` ranks over `es`-byte elements splits its work, with
// `slot_bytes` the shm step size (0: no steps, a backend without slots): 0-3, world +- 1, 64-byte multiples
// +- 1, the shm small-message and in-place thresholds +- 1, one and two slots +- 1, counts past the small size
// whose per-rank share is already a whole number of 64-byte lines with 1 .. world - 1 elements over (alone and
// after a full slot), primes (small ones and the largest below each power of 4 from 4096) and `random_count`
// seeded counts (log-uniform), all up to `max_bytes`.
std::vector<int64_t> boundary_counts(int world, size_t es, size_t slot_bytes, size_t max_bytes,
                                     std::mt19937_64& rng, int random_count);

// Element i of typed memory as a double, and the other way (rounded to the dtype).
double load_element(const void* p, DType t, int64_t i);
void store_element(void* p, DType t, int64_t i, double v);

// Rank r's input, element i, of collective `call`: a pure function of (seed, call, rank, i), so every rank
// can compute every other rank's input. Floats in [-100, 100] with fractions (their sums round), integers in
// [-1000, 1000] (no overflow at world 4); already rounded to the dtype.
double space_input(uint64_t call, int rank, int64_t i, DType t);

// The reduction over `world` ranks of element i of collective `call`, and how far the dtype's own arithmetic
// may be from it (0 for integers, Max and Min).
struct Expected {
  double value, tolerance;
};
Expected space_reference(uint64_t call, int world, int64_t i, DType t, dist::ReduceOp op);

}  // namespace ddp::testing

// dropout.h - differentiable, reproducible dropout.
//
// The keep/drop decision for element i is a pure function of (seed, offset + i) (a splitmix64 hash, see
// kernels/cpu/dropout.h), so the same seed and offset give the same mask on the CPU and on every GPU, and
// backward recomputes the mask instead of storing it. Kept elements are scaled by 1 / (1 - p).
//
// Use a DropoutGenerator to get fresh masks call after call: each dropout call takes the next numel()
// counters of its stream. Under data parallelism give each rank its own seed (e.g. seed + rank) unless
// identical masks across ranks are wanted.
#pragma once
#include <cstdint>

#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// A seed and a running counter offset. Restoring (seed, offset) from a checkpoint reproduces the masks.
struct DropoutGenerator {
  uint64_t seed = 0;
  uint64_t offset = 0;
  // Reserves n counters and returns the first.
  uint64_t take(int64_t n) {
    const uint64_t first = offset;
    offset += static_cast<uint64_t>(n);
    return first;
  }
};

// x: any shape -> same shape. p in [0, 1]. p == 0 or !training returns x itself (no copy, no counters used);
// p == 1 gives zeros. Element i uses counter offset + i.
Tensor dropout(const Tensor& x, double p, bool training, uint64_t seed, uint64_t offset = 0);
// As above with counters taken from gen (advances gen.offset by x.numel() when the mask is applied).
Tensor dropout(const Tensor& x, double p, bool training, DropoutGenerator& gen);

}  // namespace ddp::ops

// shm_reduce.h - the element-wise reduction of the shared-memory group: out = in[0] (op) in[1] (op) ...
// (op) in[n_in - 1], always in that order so every rank computes the same bits. bfloat16 accumulates in
// float32 and rounds once; Avg divides the sum by `divisor` before storing (integers truncate).
#pragma once
#include <cstddef>

#include "runtime/core/dtype.h"
#include "runtime/distributed/process_group.h"

namespace ddp::dist::shm {

// `out` may alias none of the inputs unless it is in[0] itself. With `copy_to`, the result is also written
// there, block by block while it is still in cache (saves a pass over memory).
void reduce_inputs(void* out, const void* const* in, int n_in, size_t count, DType dtype, ReduceOp op,
                   int divisor, void* copy_to = nullptr);

// The same reduction, block by block through a small scratch buffer, with the result written to each of
// `outs` (n_out places). Any out may alias any input (each block is read completely before it is written).
void reduce_to_all(void* const* outs, int n_out, const void* const* in, int n_in, size_t count, DType dtype,
                   ReduceOp op, int divisor);

}  // namespace ddp::dist::shm

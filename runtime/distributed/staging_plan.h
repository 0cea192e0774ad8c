// staging_plan.h - how one Gloo collective on CUDA buffers travels through pinned host memory: which host
// blocks it takes, their sizes, and the copies in (device -> host) and out (host -> device). host_staging.cpp
// follows the plan; it is plain C++ so the decision is tested on the CPU for every collective, layout (in
// place, out of place), root and rank position (tests/distributed/test_staging_plan.cpp).
// The rule: the output shares the input's block only when both are the very same bytes (all-reduce and
// broadcast, which the host collective runs in place on one buffer). An in-place all-gather's input is a
// slice of its output, and an in-place reduce-scatter's output a slice of its input: each buffer gets a block
// of its own size, because the host collective writes the whole output (world x count for an all-gather)
// into the output block, and the copy out reads the whole output from it.
// It must never decide from the start address alone: rank 0's in-place all-gather input starts where its
// output starts, and a block sized for the input would take world x its size.
#pragma once
#include <cstddef>

#include "runtime/distributed/collective.h"
#include "runtime/distributed/comm_buffer.h"

namespace ddp::dist {

struct StagingPlan {
  size_t in_block_bytes = 0;         // the input's pinned block
  size_t out_block_bytes = 0;        // the output's own pinned block (0 when it shares the input's)
  bool out_shares_in_block = false;  // host_out == host_in
  size_t copy_in_bytes = 0;          // D2H: in.data -> the input block, before the host collective
  size_t copy_out_bytes = 0;         // H2D: the output block -> out.data, after it
};

// The plan of one collective of `kind` on `in` and `out` (as the process group received them: all-reduce
// and broadcast pass the same buffer twice) in a group of `world` ranks.
StagingPlan plan_staging(CollectiveKind kind, int world, const CommBuffer& in, const CommBuffer& out);

}  // namespace ddp::dist

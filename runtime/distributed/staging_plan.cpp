// staging_plan.cpp - the host blocks and copies of a staged Gloo collective (see staging_plan.h).
#include "runtime/distributed/staging_plan.h"

#include "runtime/core/error.h"

namespace ddp::dist {

namespace {
// Bytes the host collective (gloo_group.cpp's execute) writes into the output block, from the input's count.
size_t host_writes(CollectiveKind kind, int world, const CommBuffer& in) {
  const size_t bytes = in.nbytes();
  switch (kind) {
    case CollectiveKind::Allgather:
      return bytes * static_cast<size_t>(world);
    case CollectiveKind::ReduceScatter:
      return bytes / static_cast<size_t>(world) / dtype_size(in.dtype) * dtype_size(in.dtype);
    default:
      return bytes;
  }
}
}  // namespace

StagingPlan plan_staging(CollectiveKind kind, int world, const CommBuffer& in, const CommBuffer& out) {
  DDP_CHECK(world >= 1, "staging plan: world size ", world);
  StagingPlan p;
  p.in_block_bytes = in.nbytes();
  // The very same bytes, not merely the same start: an in-place all-gather's input starts where rank 0's
  // output starts, and the output is world times larger.
  p.out_shares_in_block = in.data == out.data && in.nbytes() == out.nbytes();
  p.out_block_bytes = p.out_shares_in_block ? 0 : out.nbytes();
  p.copy_in_bytes = in.nbytes();
  p.copy_out_bytes = out.nbytes();
  const size_t out_capacity = p.out_shares_in_block ? p.in_block_bytes : p.out_block_bytes;
  DDP_CHECK(out_capacity >= host_writes(kind, world, in) && out_capacity >= p.copy_out_bytes,
            "gloo staging: ", collective_name(kind), " of ", in.nbytes(), " B at world ", world,
            " would write ", host_writes(kind, world, in), " B into a ", out_capacity, " B host block");
  return p;
}

}  // namespace ddp::dist

// nccl_reduce_op.h - our ReduceOp as NCCL's, for a communicator of `world` ranks. At world 1 an average is a
// sum (x / 1 == x exactly), and NCCL is asked for ncclSum: NCCL 2.27-2.29.6's one-rank kernel for ncclAvg
// (PreMulSum) leaves the tail of a buffer unwritten when the count is not a multiple of its block split
// (NVIDIA/nccl issue 1950, fixed in 2.29.7). The first GPU run (2026-12-04, H200, NCCL 2.28.3) saw it:
// reduce-scatter avg of 4093 float64 at world 1 had its last element wrong
// (GpuCollectiveSpace.NcclAtWorldOne).
#pragma once
#include <nccl.h>

#include "runtime/core/error.h"
#include "runtime/distributed/process_group.h"

namespace ddp::dist {

inline ncclRedOp_t nccl_reduce_op(ReduceOp op, int world) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Avg:
      return world == 1 ? ncclSum : ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
  }
  DDP_FAIL("nccl: unsupported reduce op");
}

}  // namespace ddp::dist

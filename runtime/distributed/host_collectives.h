// host_collectives.h - small blocking collectives on host (CPU) tensors for any process group: flags, counts,
// losses, parameter lists. Gloo and shm take host memory directly; for a group that reduces device memory only
// (NCCL: ProcessGroup::device_memory_only) the tensor is staged through the current GPU - a host
// synchronisation, fine for these rare, tiny transfers and never used for gradients.
#pragma once
#include "runtime/distributed/comm_buffer_of.h"
#include "runtime/distributed/process_group.h"
#include "runtime/tensor/tensor.h"

namespace ddp {

// All block until done; `t` is a CPU tensor and holds the result afterwards.
void host_allreduce(dist::ProcessGroup& pg, Tensor& t, dist::ReduceOp op = dist::ReduceOp::Sum);
void host_broadcast(dist::ProcessGroup& pg, Tensor& t, int root);
// out has pg.size() * in.numel() elements.
void host_allgather(dist::ProcessGroup& pg, const Tensor& in, Tensor& out);

}  // namespace ddp

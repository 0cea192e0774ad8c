// host_collectives.h - small collectives on host (CPU) tensors for any process group: flags, counts, losses,
// parameter lists. Gloo takes host memory directly; NCCL only reduces device memory, so for it the tensor is
// staged through the current GPU (a host synchronisation - fine for these rare, tiny transfers, never used on
// the gradient path).
#pragma once
#include "runtime/dist/process_group.h"
#include "runtime/tensor/tensor.h"

namespace ddp {

// All block until done; `t` is a CPU tensor and holds the result afterwards.
void host_allreduce(dist::ProcessGroup& pg, Tensor& t, dist::ReduceOp op = dist::ReduceOp::Sum);
void host_broadcast(dist::ProcessGroup& pg, Tensor& t, int root);
// out has pg.size() * in.numel() elements.
void host_allgather(dist::ProcessGroup& pg, const Tensor& in, Tensor& out);
// A CommBuffer over a whole tensor, keeping its storage alive.
dist::CommBuffer comm_buffer_of(const Tensor& t);

}  // namespace ddp

// host_collectives.cpp - host collectives, staged through the GPU for device-memory-only groups (NCCL).
#include "runtime/distributed/host_collectives.h"

namespace ddp {

namespace {
bool needs_device(dist::ProcessGroup& pg) { return pg.device_memory_only(); }
Device staging_device() { return Device::cuda(current_cuda_device()); }
}  // namespace

void host_allreduce(dist::ProcessGroup& pg, Tensor& t, dist::ReduceOp op) {
  DDP_CHECK(t.device().is_cpu(), "host_allreduce takes a CPU tensor");
  if (!needs_device(pg)) {
    pg.allreduce(comm_buffer_of(t), op)->wait();
    return;
  }
  Tensor d = t.to(staging_device());
  pg.allreduce(comm_buffer_of(d), op)->wait();
  t.copy_from(d);  // synchronous device-to-host copy
}

void host_broadcast(dist::ProcessGroup& pg, Tensor& t, int root) {
  DDP_CHECK(t.device().is_cpu(), "host_broadcast takes a CPU tensor");
  if (!needs_device(pg)) {
    pg.broadcast(comm_buffer_of(t), root)->wait();
    return;
  }
  Tensor d = t.to(staging_device());
  pg.broadcast(comm_buffer_of(d), root)->wait();
  t.copy_from(d);
}

void host_allgather(dist::ProcessGroup& pg, const Tensor& in, Tensor& out) {
  DDP_CHECK(in.device().is_cpu() && out.device().is_cpu(), "host_allgather takes CPU tensors");
  if (!needs_device(pg)) {
    pg.allgather(comm_buffer_of(in), comm_buffer_of(out))->wait();
    return;
  }
  Tensor din = in.to(staging_device()), dout = out.to(staging_device());
  pg.allgather(comm_buffer_of(din), comm_buffer_of(dout))->wait();
  out.copy_from(dout);
}

}  // namespace ddp

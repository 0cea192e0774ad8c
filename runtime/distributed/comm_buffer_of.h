// comm_buffer_of.h - tensors in the memory a process group communicates from: comm_tensor() below, and
// comm_buffer_of() (a Tensor as a CommBuffer, from runtime/distributed/tensor_comm_buffer.h) for the gradient
// path (the reducer's buckets, comm hooks) and the host collectives alike.
#pragma once
#include "runtime/distributed/comm_buffer.h"
#include "runtime/distributed/process_group.h"
#include "runtime/distributed/tensor_comm_buffer.h"
#include "runtime/tensor/tensor.h"

namespace ddp {

// A zero-filled flat tensor of `numel` in the memory `pg` prefers for buffers it communicates often
// (ProcessGroup::allocate_comm_buffer; shm: a shared-memory segment its all-reduce reads in place), or an
// ordinary Tensor::zeros where the backend has nothing better. `in_comm_memory` (optional) tells which.
inline Tensor comm_tensor(dist::ProcessGroup& pg, int64_t numel, DType dtype, Device device,
                          bool* in_comm_memory = nullptr) {
  dist::CommBuffer b = pg.allocate_comm_buffer(numel, dtype, device);
  if (in_comm_memory) *in_comm_memory = b.data != nullptr;
  if (!b.data) return Tensor::zeros({numel}, dtype, device);
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = {numel};
  impl->dtype = dtype;
  impl->storage = Storage::wrap(b.data, static_cast<size_t>(numel) * dtype_size(dtype), device,
                                [keep = b.keepalive]() mutable { keep.reset(); });
  return Tensor(std::move(impl));
}

}  // namespace ddp

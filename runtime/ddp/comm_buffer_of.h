// comm_buffer_of.h - the bridge from a Tensor to the process group's CommBuffer (runtime/distributed knows
// buffers, not tensors): the whole tensor's memory, keeping its storage alive while a collective uses it. On the
// gradient path (the reducer's buckets, comm hooks) and in the host collectives alike.
#pragma once
#include "runtime/distributed/comm_buffer.h"
#include "runtime/tensor/tensor.h"

namespace ddp {

inline dist::CommBuffer comm_buffer_of(const Tensor& t) {
  return dist::CommBuffer{t.raw_data(), t.numel(), t.dtype(), t.device(), t.storage()};
}

}  // namespace ddp

// tensor_comm_buffer.h - the bridge from a Tensor to the CommBuffer the process groups move: the whole
// tensor's memory, keeping its storage alive while a collective uses it. The one header of dist/ that sees a
// Tensor, and header-only: the process groups themselves stay tensor-free. It lives here, below ops/ and
// ddp/, so that both may use it (ops/sync_batchnorm's statistics, the reducer's buckets, comm hooks, the host
// collectives) without ops/ reaching up into ddp/.
#pragma once
#include "runtime/distributed/comm_buffer.h"
#include "runtime/tensor/tensor.h"

namespace ddp {

inline dist::CommBuffer comm_buffer_of(const Tensor& t) {
  return dist::CommBuffer{t.raw_data(), t.numel(), t.dtype(), t.device(), t.storage()};
}

}  // namespace ddp

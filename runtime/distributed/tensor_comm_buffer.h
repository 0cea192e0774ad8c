// tensor_comm_buffer.h - the bridge from a Tensor to the CommBuffer the process groups move: the whole
// tensor's memory, keeping its storage alive while a collective uses it. The one header of dist/ that sees a
// Tensor, and header-only: the process groups themselves stay tensor-free. It lives here, below ops/ and
// ddp/, so that both may use it (ops/sync_batchnorm's statistics, the reducer's buckets, comm hooks, the host
// collectives) without ops/ reaching up into ddp/.
#pragma once
#include "runtime/distributed/comm_buffer.h"
#include "runtime/tensor/tensor.h"

namespace ddp {

// CUDA memory of the stream-ordered allocator also gets record_stream: a GPU group records its stream on the
// storage instead of holding the tensor until its watchdog sees the collective finish
// (stream_ordered_release.h). The functor uses the storage the CommBuffer's keepalive holds.
inline dist::CommBuffer comm_buffer_of(const Tensor& t) {
  dist::CommBuffer b{t.raw_data(), t.numel(), t.dtype(), t.device(), t.storage()};
  if (t.storage() && t.storage()->frees_in_stream_order()) {
    Storage* s = t.storage().get();
    b.record_stream = [s](void* stream) { s->record_stream(stream); };
  }
  return b;
}

}  // namespace ddp

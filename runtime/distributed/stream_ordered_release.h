// stream_ordered_release.h - what a GPU collective keeps of its buffers, so that their memory goes back to
// the pool in stream order, when the collective is done on the GPU, and not when the NCCL watchdog next looks
// (every 50 ms): otherwise a ZeRO-3 unit gathered and resharded within one tick stays allocated past its
// `reshard`, and the GPU's real peak exceeds the memory account.
// At issue, once the collective is queued on its stream: a buffer whose memory can record a stream
// (CommBuffer::record_stream: a Storage of the stream-ordered CUDA allocator) records the collective's stream
// and is not kept: whenever its last user drops it, its free first waits for that stream (Storage's
// record_stream + cudaFreeAsync in runtime/tensor/cuda/allocator.cpp), exactly as PyTorch's record_stream.
// Any other buffer's keepalive (memory someone else owns) is returned, for the Work to hold until the
// watchdog saw the collective complete. Plain C++, so the bookkeeping is tested on the CPU
// (tests/distributed/test_stream_ordered_release.cpp).
#pragma once
#include <memory>
#include <vector>

#include "runtime/distributed/comm_buffer.h"

namespace ddp::dist {

// The keepalives a collective's Work must hold until the GPU finished it.
using HeldBuffers = std::vector<std::shared_ptr<void>>;

// Called once the collective on `in` and `out` (the same buffer for all-reduce and broadcast) is queued on
// `stream` (a cudaStream_t).
inline HeldBuffers hold_until_stream_done(const CommBuffer& in, const CommBuffer& out, void* stream) {
  HeldBuffers held;
  for (const CommBuffer* b : {&in, &out}) {
    if (b->record_stream)
      b->record_stream(stream);  // its free now waits for the collective's stream: nothing to hold
    else if (b->keepalive)
      held.push_back(b->keepalive);
  }
  return held;
}

}  // namespace ddp::dist

// host_staging.h - one collective's trip of CUDA buffers through pinned host memory, for the Gloo backend.
// At issue (caller thread) an event is recorded on the caller's current stream of the buffer's device. On the
// Gloo thread a per-device side stream waits on it, copies device -> pinned host, the host collective runs,
// then host -> device on the side stream and an end event is recorded. Work::wait() makes the caller's
// current stream wait on that end event. Plain C++ interface: gloo_group.cpp includes it only when
// DDP_WITH_CUDA. Which pinned blocks, of what size, and the copies in and out follow plan_staging()
// (staging_plan.h): the output shares the input's block only when both are the same bytes.
// Lifetime: the staging owns copies of both CommBuffers (their keepalives: the caller's tensors) and the
// pinned blocks. When it is destroyed while its H2D copy may still run, none of them is released yet: they
// are parked in a DeferredRelease and released once the end event completed (checked without blocking at
// the next staging's issue and copy-out), so neither the stream-ordered allocator nor the pinned pool can
// hand that memory out while the side stream still reads or writes it.
#pragma once
#include <cstddef>
#include <memory>

#include "runtime/distributed/collective.h"
#include "runtime/distributed/comm_buffer.h"

namespace ddp::dist::cuda {

class HostStaging {
 public:
  // Caller thread: `in` and `out` of a collective of `kind` in a group of `world` ranks, on the same CUDA
  // device (the same buffer for all-reduce and broadcast; in-place all-gather and reduce-scatter overlap).
  HostStaging(CollectiveKind kind, int world, const CommBuffer& in, const CommBuffer& out);
  // Never blocks: releases the buffers now if the H2D copy finished (or never ran), else once it has.
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // Gloo thread: side stream waits on the issue event, copies `in` to pinned memory and waits for the copy.
  void copy_in();
  void* host_in() const;
  void* host_out() const;
  // Gloo thread: copies the host result to `out` on the side stream and records the end event (no host wait).
  void copy_out();
  // Caller thread: makes its current stream (of the buffers' device) wait on the end event.
  void join_current_stream();

  // Stagings whose buffers are still parked until their H2D copy finishes (after a non-blocking check).
  static size_t parked();

  struct State;

 private:
  std::shared_ptr<State> st_;  // buffers, pinned blocks and events; may outlive this object (see above)
};

}  // namespace ddp::dist::cuda

// host_staging.h - one collective's trip of CUDA buffers through pinned host memory, for the Gloo
// backend. At issue (caller thread) an event is recorded on the caller's current stream of the buffer's
// device. On the Gloo thread a per-device side stream waits on it, copies device -> pinned host, the
// host collective runs, then host -> device on the side stream and an end event is recorded.
// Work::wait() makes the caller's current stream wait on that end event. Plain C++ interface:
// gloo_group.cpp includes it only when DDP_WITH_CUDA.
#pragma once
#include <memory>

#include "runtime/dist/comm_buffer.h"

namespace ddp::dist::cuda {

class HostStaging {
 public:
  // Caller thread: `in` and `out` are on the same CUDA device (they may be the same buffer).
  HostStaging(const CommBuffer& in, const CommBuffer& out);
  // Waits for the H2D copy (if it was issued) before the pinned memory goes back to the pool.
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // Gloo thread: side stream waits on the issue event, copies `in` to pinned memory and waits for the copy.
  void copy_in();
  void* host_in() const { return host_in_; }
  void* host_out() const { return host_out_; }
  // Gloo thread: copies the host result to `out` on the side stream and records the end event (no host wait).
  void copy_out();
  // Caller thread: makes its current stream (of the buffers' device) wait on the end event.
  void join_current_stream();

  struct Events;

 private:
  CommBuffer in_, out_;
  void* host_in_ = nullptr;
  void* host_out_ = nullptr;
  std::unique_ptr<Events> events_;
};

}  // namespace ddp::dist::cuda

// nccl_group.h - the GPU process group on NCCL. Stream model (as in c10d's ProcessGroupNCCL): the group owns
// one communication stream on its GPU. Issuing a collective records an event on the caller's current stream,
// makes the comm stream wait on it, enqueues the NCCL call on the comm stream and records an end event there;
// the host never blocks. Work::wait() makes the caller's current stream wait on the end event (the host only
// blocks for barrier() and wait_for()). Buffers go back to the allocator in stream order: a tensor's storage
// records the comm stream at issue, so its free (whenever its last user drops it) waits for the collective
// on the GPU, not for the watchdog's next look (stream_ordered_release.h); the Work holds only memory that
// cannot record a stream, until the watchdog saw it complete. Comm streams are reused, never destroyed.
// A watchdog thread marks completions, polls ncclCommGetAsyncError, publishes this rank's progress to the
// store, and aborts the communicator (ncclCommAbort) when a collective passes its timeout, failing it with an
// error naming the collective, its sequence number, count, dtype and the ranks that did not arrive.
// abort() does the same at once with the caller's reason: ncclCommAbort ends the kernels in flight (peers
// blocked on this rank then fail by their async error or timeout), every pending and later Work fails with
// it. The communicator is non-blocking (ncclConfig_t::blocking = 0): its creation is polled against the same
// timeout and aborted when a rank never completes it (one that died after the unique-id exchange), with an
// error worded like a collective timeout, instead of hanging in ncclCommInitRank.
#pragma once
#include <memory>
#include <string>

#include "runtime/distributed/process_group.h"
#include "runtime/distributed/store.h"

namespace ddp::dist {

class NcclProcessGroup : public ProcessGroup {
 public:
  // Selects the GPU (options.cuda_device, else local_rank % device_count), exchanges the NCCL unique id
  // through the store (rank 0 publishes it) after all ranks checked in, and creates the communicator
  // (bounded by options.timeout: a clear error instead of a hang when a rank does not take part).
  NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size, int local_rank,
                   const ProcessGroupOptions& options);
  // Waits (bounded by the timeouts) for outstanding collectives, then destroys (or aborts) the communicator.
  ~NcclProcessGroup() override;

  std::shared_ptr<Work> allreduce(CommBuffer buf, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> broadcast(CommBuffer buf, int root) override;
  std::shared_ptr<Work> allgather(CommBuffer in, CommBuffer out) override;
  std::shared_ptr<Work> reduce_scatter(CommBuffer in, CommBuffer out, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> barrier() override;
  uint64_t next_sequence_number() const override;
  std::string backend_name() const override { return "nccl"; }
  bool device_memory_only() const override { return true; }
  bool records_device_events() const override { return true; }
  // Every collective of this group (flight_recorder.h): issued by the caller, started and completed as the
  // watchdog sees the CUDA events (with the GPU's own duration), failed on a timeout or NCCL error.
  const FlightRecorder* flight_recorder() const override;
  void abort(const std::string& why) override;
  bool aborted() const override;
  // The GPU this group runs on.
  int device() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::dist

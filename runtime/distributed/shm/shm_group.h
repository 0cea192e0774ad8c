// shm_group.h - the process group for ranks on one host: CPU buffers move through POSIX shared memory.
//
// Each rank owns one segment: a control block (shm_sync.h) and two slots of DDP_SHM_CHUNK_BYTES (default
// 1 MiB) used alternately, so a rank can fill the next chunk while slower peers still read the previous one.
// A collective runs chunk by chunk in lock-step phases; all-reduce of one chunk is a reduce-scatter (rank r
// reduces the r-th part of every rank's slot, in rank order, so all ranks get the same bits) then an
// all-gather of the parts. Small all-reduces (<= 32 KiB) skip the second phase: every rank reduces the whole
// chunk. Waiting is a spin, then futex sleep: a short spin (20 us) while the caller computes, a longer one
// (DDP_SHM_WAITED_SPIN_US, 300 us) while a caller blocks in Work::wait() - then this rank's core has nothing
// else to do, and a futex wake-up costs 50-100 us on a virtual machine.
//
// Same contract as the Gloo group: issuing queues the collective for one background thread (or, with
// ProcessGroupOptions::run_on_caller, runs it on the issuing thread before returning; issue order,
// sequence numbers, queued_process_group.h; collectives still queued when the group is destroyed fail), each
// collective ends within its timeout with an error naming the ranks that did not arrive, and a peer that
// dies, fails, aborts or leaves is noticed within ~20 ms. The ranks' calls are compared through the segment
// on every collective (a mismatch is an error, not a wrong result). Segments are unlinked from /dev/shm as
// soon as every rank mapped them; ones left by killed jobs are removed by the next group created on the host.
//
// Registered buffers (allocate_comm_buffer, used by the DDP reducer for its gradient buckets): each is its
// own segment "<this rank's segment name>.b<index>", indices counted per rank in allocation order, so a peer
// can open it by name when it first needs it. An all-reduce of more than DDP_SHM_DIRECT_MIN_BYTES (default 32
// KiB) whose buffer lies in one registered buffer, where every rank passes the same (index, offset), takes
// the in-place path: rank r reduces part r reading every rank's buffer directly and writes the result into
// part r of every rank's buffer; a second mark tells that all writes are done. No slot copies, no all-gather:
// per rank one read of the data per rank and one write per rank. Whether all ranks agree is decided from the
// call stamps of the first phase; when they do not (another offset, another buffer, one rank's memory not
// registered) the collective runs the slot algorithm instead - same result. All-gather and reduce-scatter
// whose input lies in a registered buffer (the same index on every rank; reduce-scatter: the same offset too;
// all-gather: any, so an input that is this rank's chunk of a registered output qualifies) read the peers'
// inputs in place the same way: rank r reduces chunk r of every rank's input into its output, or copies every
// peer's input into its output - one read of the data, no slot copies. A buffer's name is unlinked once
// its first in-place collective has run (every peer mapped it then), when its memory is freed, or when the
// group is destroyed; ddprun and the next group remove what a killed process left.
#pragma once
#include <memory>
#include <string>

#include "runtime/distributed/queued_process_group.h"
#include "runtime/distributed/store.h"

namespace ddp::dist {

class ShmProcessGroup : public QueuedProcessGroup {
 public:
  // `store` should be this group's own connection. Blocks until every rank mapped every segment (or the
  // timeout). All ranks must be on this host and share /dev/shm.
  ShmProcessGroup(std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& options);
  // Finishes the running collective, fails the queued ones, tells the peers this rank left.
  ~ShmProcessGroup() override;

  std::string backend_name() const override { return "shm"; }
  // A shared-memory segment of its own (CPU, world > 1, above the in-place threshold); else data == nullptr.
  CommBuffer allocate_comm_buffer(int64_t numel, DType dtype, Device device) override;
  // All-reduces that took the in-place path so far (tests, statistics).
  uint64_t direct_allreduces() const;
  // All-gathers and reduce-scatters that took the in-place path so far.
  uint64_t direct_gather_scatters() const;
  // Peers' registered buffers this rank has mapped now (tests: a freed buffer's peers drop theirs).
  size_t peer_buffers_mapped() const;

  struct Impl;

 protected:
  void prepare(Task& t) override;
  std::shared_ptr<Work> make_work(Task& t) override;
  void run(Task& t) override;
  void on_failure(const std::string& why) override;
  // Sets the abort flag every wait checks, wakes this rank's sleeping waits and publishes this rank as failed
  // (with the reason) so that peers waiting on it end within one wait slice.
  void interrupt(const std::string& why) override;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::dist

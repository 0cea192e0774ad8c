// process_group.h - the collective interface every backend implements (shaped like c10d's Backend in
// miniature): a ProcessGroup issues collectives on CommBuffers and returns at once with a Work to wait on.
// Collectives run in issue order, carry a sequence number, and end by their timeout with an error naming the
// ranks that did not arrive - never a silent hang. Backends: shm/shm_group.h (CPU, ranks on one host),
// shm/hier_group.h (CPU, several hosts), gloo_group.h (CPU, and CUDA buffers staged through host memory),
// cuda/nccl_group.h (CUDA). Create them with new_process_group() (process_group_factory.h). Callers ask a
// group's capabilities (device_memory_only, ...), never its backend name. abort() ends a group at once (fault
// tolerance: a rank died, the survivors stop and rebuild a new group over the live ranks).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/distributed/comm_buffer.h"

namespace ddp::dist {

enum class ReduceOp { Sum, Avg, Max, Min };
const char* reduce_op_name(ReduceOp op);

// The handle of one issued collective.
class Work {
 public:
  explicit Work(std::string description) : description_(std::move(description)) {}
  virtual ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // True once the collective finished (successfully or not). NCCL: the GPU work has finished.
  virtual bool is_completed();
  // Waits for the collective and rethrows its error. For CUDA buffers the caller's current stream is made to
  // wait for the result instead of the host where the backend allows it (NCCL).
  virtual void wait();
  // Waits at most `timeout`; false if still running. Rethrows the collective's error once it finished.
  virtual bool wait_for(std::chrono::milliseconds timeout);
  // The collective's error, or null (also null while running).
  virtual std::exception_ptr error();
  // "allreduce #3 (1024 x float32, sum)".
  const std::string& description() const { return description_; }

  // When the backend marked the work finished (steady clock; epoch while running). For Gloo the collective's
  // real end; for NCCL when the watchdog saw the end event (up to its polling period later).
  std::chrono::steady_clock::time_point finished_at();

  // NCCL: timing events (cudaEvent_t) on the communication stream right before and right after the
  // collective, valid while this Work lives (the reducer's GPU statistics read them); nullptr for other
  // backends.
  virtual void* device_start_event() const { return nullptr; }
  virtual void* device_end_event() const { return nullptr; }

  // For backends: marks the work finished, with an error or without. Only the first call counts.
  void finish(std::exception_ptr err = nullptr);

 protected:
  // Called by wait()/wait_for() once the host side is done and no error happened (CUDA stream joins).
  virtual void on_completed_wait() {}
  bool host_done();

  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::chrono::steady_clock::time_point finished_at_{};
  std::exception_ptr error_;
  std::string description_;
};

// Options shared by the backends.
struct ProcessGroupOptions {
  // Per-collective timeout: 10 minutes, or DDP_COLLECTIVE_TIMEOUT_S seconds when set.
  std::chrono::milliseconds timeout = default_collective_timeout();
  // Store key prefix of this group; empty -> "pg<N>" where N counts the groups made on this Store client
  // (groups must then be created in the same order on every rank). See group_name().
  std::string name;
  // DDP_DEBUG_COLLECTIVES=1: before each collective all ranks compare (through the store) what they call and
  // report the first mismatch. Costs a store round trip per rank and collective.
  bool debug_collectives = debug_collectives_from_env();
  // Gloo: address (hostname) or network interface this rank listens on. Both empty: GLOO_SOCKET_IFNAME when
  // set, else the local address that routes to MASTER_ADDR (127.0.0.1 for a local master).
  std::string gloo_hostname;
  std::string gloo_interface;
  // NCCL: GPU to use; -1 -> local_rank % device_count.
  int cuda_device = -1;
  // CPU groups (gloo, shm, hier): run each collective on the thread that issues it, before the call returns
  // (the Work it returns is complete), instead of on the group's background thread. For ranks that keep
  // every core busy computing: no core is left for the background thread to overlap on, and each hand-off
  // to and from it costs a wake-up. Collectives still run in issue order (concurrent callers take turns).
  bool run_on_caller = false;

  static std::chrono::milliseconds default_collective_timeout();
  static bool debug_collectives_from_env();
};

// Collectives that this thread issues while the guard lives get `timeout` instead of their group's
// (ProcessGroupOptions::timeout): for callers with a timeout per call, like torch.distributed's `timeout`
// argument. Honoured by the CPU groups (gloo, shm, hier); guards nest (the innermost applies).
class ScopedCollectiveTimeout {
 public:
  explicit ScopedCollectiveTimeout(std::chrono::milliseconds timeout);
  ~ScopedCollectiveTimeout();
  ScopedCollectiveTimeout(const ScopedCollectiveTimeout&) = delete;
  ScopedCollectiveTimeout& operator=(const ScopedCollectiveTimeout&) = delete;
  // The innermost live guard's timeout on this thread; 0 when there is none.
  static std::chrono::milliseconds current();

 private:
  std::chrono::milliseconds previous_;
};

class Store;
// The one place a group's store key prefix is chosen: options.name, or else "pg<N>" from the counter of
// `store` (Store::next_group_id), which advances in the same order on every rank.
std::string group_name(const ProcessGroupOptions& options, Store& store);

class FlightRecorder;

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // In place: every rank ends with the reduction of all ranks' buffers (Avg = Sum / size; integer Avg
  // truncates).
  virtual std::shared_ptr<Work> allreduce(CommBuffer buf, ReduceOp op = ReduceOp::Sum) = 0;
  // In place: every rank ends with root's buffer.
  virtual std::shared_ptr<Work> broadcast(CommBuffer buf, int root) = 0;
  // out (size * in.numel elements) = concatenation of every rank's `in`, in rank order.
  virtual std::shared_ptr<Work> allgather(CommBuffer in, CommBuffer out) = 0;
  // in has size * out.numel elements; rank r gets the reduction of chunk r of every rank's `in`.
  virtual std::shared_ptr<Work> reduce_scatter(CommBuffer in, CommBuffer out,
                                               ReduceOp op = ReduceOp::Sum) = 0;
  // Completes once every rank has issued it (and all earlier collectives of this group finished).
  virtual std::shared_ptr<Work> barrier() = 0;
  // The sequence number the next collective issued here will carry (0 for the first).
  virtual uint64_t next_sequence_number() const = 0;
  // For messages and records only: callers ask the capabilities below, never compare names.
  virtual std::string backend_name() const = 0;
  // The record of this group's recent collectives (flight_recorder.h), or nullptr when the backend keeps none.
  virtual const FlightRecorder* flight_recorder() const { return nullptr; }

  // Ends this rank's use of the group at once, for per-step fault tolerance (a peer died; the survivors stop
  // and later build a new group over the live ranks under another ProcessGroupOptions::name). Any thread,
  // idempotent (the first reason counts), returns within ~100 ms: the collective in progress ends with an
  // error containing `why`, queued and later collectives fail at once with it; peers waiting on this rank see
  // it gone (their collectives fail too). The group can only be destroyed afterwards, and its destruction
  // does not wait for peers.
  virtual void abort(const std::string& why) = 0;
  // True once abort() was called.
  virtual bool aborted() const = 0;

  // ---- capabilities ----
  // True when collectives take GPU memory only (NCCL): host data must be staged through a GPU
  // (host_collectives.h). False: any buffer; the backend stages CUDA buffers itself where needed.
  virtual bool device_memory_only() const { return false; }
  // True when each Work records CUDA events around its collective on a device stream
  // (Work::device_start_event), so a collective's time can be read on the GPU's clock.
  virtual bool records_device_events() const { return false; }

  // Zero-filled memory for a buffer this rank will communicate often (DDP's gradient buckets). A backend may
  // place it where its collectives are cheaper: shm puts each such buffer in its own shared-memory segment,
  // and an all-reduce of it (every rank passing its buffer of the same allocation order, at the same offset)
  // reads and writes the peers' buffers in place. Returns a CommBuffer with data == nullptr when the backend
  // has nothing better than ordinary memory; otherwise the keepalive owns the memory (drop it to free).
  // Allocate such buffers in the same order on every rank.
  virtual CommBuffer allocate_comm_buffer(int64_t numel, DType dtype, Device device) {
    (void)numel;
    (void)device;
    return CommBuffer{nullptr, 0, dtype, device, nullptr};
  }

 private:
  int rank_;
  int size_;
};

}  // namespace ddp::dist

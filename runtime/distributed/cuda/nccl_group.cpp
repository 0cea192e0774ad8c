// nccl_group.cpp - NCCL communicator setup through the store, collectives on a dedicated comm stream ordered
// after the caller's current stream by events, and a watchdog for completion, async errors and timeouts.
#include "runtime/distributed/cuda/nccl_group.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"
#include "runtime/core/log.h"
#include "runtime/distributed/collective.h"
#include "runtime/distributed/collective_tracker.h"
#include "runtime/distributed/cuda/nccl_reduce_op.h"
#include "runtime/distributed/env.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/poll_until.h"
#include "runtime/distributed/stream_ordered_release.h"

namespace ddp::dist {

namespace {
using ddp::cuda::DeviceGuard;

constexpr auto kWatchdogPeriod = std::chrono::milliseconds(50);

// Comm streams are reused by later groups, never destroyed: a tensor freed after its group is gone may still
// have the group's stream recorded (stream_ordered_release.h), and its free records an event on it.
class CommStreams {
 public:
  static cudaStream_t take(int device) {
    std::lock_guard<std::mutex> g(mu());
    auto& f = free()[device];
    if (!f.empty()) {
      cudaStream_t s = f.back();
      f.pop_back();
      return s;
    }
    cudaStream_t s = nullptr;
    DDP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));  // the caller made `device` current
    return s;
  }
  static void give(int device, cudaStream_t s) {
    std::lock_guard<std::mutex> g(mu());
    free()[device].push_back(s);
  }

 private:
  static std::mutex& mu() {
    static std::mutex* m = new std::mutex();  // never destroyed, like the streams
    return *m;
  }
  static std::map<int, std::vector<cudaStream_t>>& free() {
    static auto* f = new std::map<int, std::vector<cudaStream_t>>();
    return *f;
  }
};

// The enqueue of one collective on the (non-blocking) communicator of Impl `s`, checked like DDP_NCCL_CHECK:
// a failure names the call's text and this file:line.
#define DDP_NCCL_ENQUEUE(s, call) (s).check_enqueue((call), #call, __FILE__, __LINE__)

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::BF16:
      return ncclBfloat16;
    case DType::I32:
      return ncclInt32;
    case DType::I64:
      return ncclInt64;
    case DType::U8:
      return ncclUint8;
  }
  DDP_FAIL("nccl: unsupported dtype");
}

// Work of one NCCL collective: completion is the end event on the comm stream.
class NcclWork : public Work {
 public:
  NcclWork(std::string description, int device, bool host_blocking)
      : Work(std::move(description)), device_(device), host_blocking_(host_blocking) {
    DeviceGuard dg(device_);
    // With timing: the reducer's statistics measure the collective on the GPU's clock (ddp/step_clock.h).
    DDP_CUDA_CHECK(cudaEventCreate(&start));
    DDP_CUDA_CHECK(cudaEventCreate(&end));
  }
  ~NcclWork() override {
    if (start) cudaEventDestroy(start);  // safe while pending: CUDA releases them once completed
    if (end) cudaEventDestroy(end);
  }
  void* device_start_event() const override { return start; }
  void* device_end_event() const override { return end; }

  // Stream semantics: the caller's current stream waits on the end event; the host does not block
  // (barrier() blocks the host until every rank arrived).
  void wait() override {
    if (host_blocking_) return Work::wait();
    if (auto err = error()) std::rethrow_exception(err);
    join_current_stream();
  }

  CollectiveDesc desc;
  HeldBuffers held;             // keepalives of memory that cannot record the comm stream, until completion
  cudaEvent_t start = nullptr;  // on the comm stream, once it waited for the caller's stream
  cudaEvent_t end = nullptr;
  std::chrono::steady_clock::time_point deadline;
  bool seen_started = false;  // the flight recorder has its start (the watchdog saw the start event)

 protected:
  void on_completed_wait() override { join_current_stream(); }

 private:
  void join_current_stream() {
    DeviceGuard dg(device_);
    DDP_CUDA_CHECK(cudaStreamWaitEvent(ddp::cuda::current_stream(), end, 0));
  }
  int device_;
  bool host_blocking_;
};

}  // namespace

struct NcclProcessGroup::Impl {
  int rank = 0;
  int size = 1;
  int device = 0;
  ProcessGroupOptions options;
  std::string prefix;
  std::shared_ptr<Store> store;
  std::unique_ptr<CollectiveTracker> tracker;
  std::unique_ptr<FlightRecorder> flight;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* barrier_scratch = nullptr;

  mutable std::mutex mu;  // guards everything below
  std::condition_variable cv;
  std::deque<std::shared_ptr<NcclWork>> pending;
  uint64_t next_seq = 0;
  int64_t last_issued = -1;
  int64_t last_published = -1;
  std::string broken;
  bool stopping = false;
  bool aborted = false;       // the communicator was aborted (a failure or abort())
  bool user_aborted = false;  // abort() was called
  std::thread watchdog;

  std::shared_ptr<Work> issue(CollectiveDesc d, CommBuffer in, CommBuffer out, bool host_blocking,
                              const std::function<void()>& launch);
  void watchdog_loop();
  // Fails every pending work (the first with `first_error`) and aborts the communicator. Called with mu held.
  void fail_all(const std::string& first_error);
  // ncclCommAbort once (the error, with its file:line, is logged: the callers are failing already). Called
  // with mu held.
  void abort_communicator();
  // The communicator is non-blocking (ncclConfig_t::blocking = 0): an NCCL call may return ncclInProgress and
  // the communicator is usable again once ncclCommGetAsyncError says so. Waits for that until `deadline`;
  // returns the final state, ncclInProgress when the deadline passed.
  ncclResult_t settle(ncclResult_t r, std::chrono::steady_clock::time_point deadline) const;
  // Throws a clear error unless the enqueue `call` (its result r) settles as ncclSuccess within the timeout;
  // the error names the call's text and its file:line (DDP_NCCL_ENQUEUE), as DDP_NCCL_CHECK does.
  void check_enqueue(ncclResult_t r, const char* call, const char* file, int line) const;
  // Creates the communicator; on a timeout or an error aborts it and throws the collective-timeout style
  // error.
  void create_communicator(const ncclUniqueId& id);
};

ncclResult_t NcclProcessGroup::Impl::settle(ncclResult_t r,
                                            std::chrono::steady_clock::time_point deadline) const {
  if (r != ncclInProgress || comm == nullptr) return r;
  ncclResult_t state = ncclInProgress;
  auto query = [&] {
    ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    if (q != ncclSuccess) state = q;
    return state == ncclInProgress ? PollState::InProgress
                                   : (state == ncclSuccess ? PollState::Done : PollState::Failed);
  };
  poll_until(query, deadline);
  return state;
}

void NcclProcessGroup::Impl::check_enqueue(ncclResult_t r, const char* call, const char* file,
                                           int line) const {
  r = settle(r, std::chrono::steady_clock::now() + options.timeout);
  if (r == ncclSuccess) return;
  const char* last = ncclGetLastError(comm);
  ::ddp::detail::fail(file, line, "nccl: ", call, " failed on rank ", rank, " of ", size, ": ",
                      r == ncclInProgress ? "still in progress after timeout " +
                                                std::to_string(options.timeout.count()) + " ms"
                                          : std::string(ncclGetErrorString(r)),
                      last && *last ? std::string(" (") + last + ")" : std::string());
}

void NcclProcessGroup::Impl::create_communicator(const ncclUniqueId& id) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // returns at once; completion and the deadline are polled below
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  r = settle(r, deadline);
  if (r == ncclSuccess) return;
  const char* last = comm ? ncclGetLastError(comm) : nullptr;
  const std::string cause = r == ncclInProgress ? std::string("ncclCommInitRankConfig still in progress")
                                                : std::string(ncclGetErrorString(r));
  if (comm) {
    ncclResult_t a = ncclCommAbort(comm);  // unblocks NCCL's init threads of this communicator
    if (a != ncclSuccess) DDP_LOG(Error, "nccl: ncclCommAbort failed: ", ncclGetErrorString(a));
    comm = nullptr;
  }
  // The same shape as a collective's timeout error (CollectiveTracker::failure_message).
  DDP_FAIL("nccl communicator creation of group '", prefix, "' failed on rank ", rank, " of ", size,
           " after timeout ", options.timeout.count(), " ms: ",
           r == ncclInProgress
               ? "every rank checked in and got the unique id, but the communicator did not form: a rank "
                 "crashed or is stuck after the unique-id exchange, or the GPUs cannot reach each other "
                 "(NCCL_DEBUG=INFO shows the transport NCCL tried; DDP_COLLECTIVE_TIMEOUT_S sets the timeout)"
               : "NCCL reported an error while creating the communicator (NCCL_DEBUG=INFO shows why)",
           ". Cause reported by nccl: ", cause,
           last && *last ? std::string(" (") + last + ")" : std::string());
}

NcclProcessGroup::NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size, int local_rank,
                                   const ProcessGroupOptions& options)
    : ProcessGroup(rank, size), impl_(std::make_unique<Impl>()) {
  DDP_CHECK(store != nullptr, "nccl: a process group needs a store");
  DDP_CHECK(size >= 1 && rank >= 0 && rank < size, "nccl: rank ", rank, " of world size ", size,
            " is invalid: expected 0 <= rank < size");
  Impl& s = *impl_;
  s.rank = rank;
  s.size = size;
  s.options = options;
  s.store = std::move(store);
  s.prefix = group_name(options, *s.store);
  s.tracker = std::make_unique<CollectiveTracker>(s.store, s.prefix, rank, size, options.timeout);
  s.flight = std::make_unique<FlightRecorder>("nccl", rank, size, flight_recorder_entries_from_env());
  s.flight->set_group_name(s.prefix);

  // The GPU first: NCCL binds the communicator to the current device.
  if (options.cuda_device >= 0) {
    DDP_CHECK(options.cuda_device < cuda_device_count(), "nccl: cuda_device ", options.cuda_device,
              " requested but ", cuda_device_count(), " GPU(s) are visible");
    s.device = options.cuda_device;
    DDP_CUDA_CHECK(cudaSetDevice(s.device));
  } else {
    s.device = select_cuda_device(local_rank);
    DDP_CHECK(s.device >= 0, "nccl: no GPU is visible (", cuda_unavailable_reason(),
              "); use the gloo backend");
  }
  DeviceGuard dg(s.device);

  // Every rank checks in; then rank 0's unique id goes through the store. A missing rank is named here
  // instead of hanging inside ncclCommInitRank.
  std::vector<std::string> joined;
  for (int r = 0; r < size; ++r) joined.push_back(s.prefix + "/nccl/joined/" + std::to_string(r));
  s.store->set(joined[rank], "1");
  if (rank == 0) {
    ncclUniqueId id;
    DDP_NCCL_CHECK(ncclGetUniqueId(&id));
    s.store->set(s.prefix + "/nccl/unique_id", std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  }
  try {
    s.store->wait(joined, options.timeout);
  } catch (const Error& e) {
    DDP_FAIL("nccl: group '", s.prefix, "' could not start on rank ", rank, ": not every rank joined within ",
             options.timeout.count(), " ms: ", e.what());
  }
  std::string id_bytes = s.store->get(s.prefix + "/nccl/unique_id", options.timeout);
  DDP_CHECK(id_bytes.size() == sizeof(ncclUniqueId), "nccl: the unique id in the store has ", id_bytes.size(),
            " bytes, expected ", sizeof(ncclUniqueId), " (ranks built against different NCCL versions?)");
  ncclUniqueId id;
  std::memcpy(&id, id_bytes.data(), sizeof(id));
  s.create_communicator(id);
  s.stream = CommStreams::take(s.device);
  DDP_CUDA_CHECK(cudaMalloc(&s.barrier_scratch, sizeof(float)));
  DDP_LOG(Info, "nccl group '", s.prefix, "': rank ", rank, " of ", size, " on GPU ", s.device);
  s.watchdog = std::thread([&s] { s.watchdog_loop(); });
}

NcclProcessGroup::~NcclProcessGroup() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> g(s.mu);
    s.stopping = true;
  }
  s.cv.notify_all();
  s.watchdog.join();  // returns once nothing is pending (completed, failed or timed out)
  {
    DeviceGuard dg(s.device);
    if (s.comm && !s.aborted) {
      // Non-blocking communicator: finalize (flushes, may be in progress), then destroy; abort if it hangs.
      ncclResult_t r =
          s.settle(ncclCommFinalize(s.comm), std::chrono::steady_clock::now() + s.options.timeout);
      if (r == ncclSuccess) r = ncclCommDestroy(s.comm);
      if (r != ncclSuccess) {
        DDP_LOG(Error, "nccl: finalizing the communicator failed (", ncclGetErrorString(r), "); aborting it");
        ncclCommAbort(s.comm);
      }
    }
    if (s.stream) CommStreams::give(s.device, s.stream);  // after the watchdog saw every collective finish
    if (s.barrier_scratch) cudaFree(s.barrier_scratch);
  }
  s.flight->dump_to_dir(s.flight->has_failed() ? "failure" : "exit", /*log=*/false);
}

int NcclProcessGroup::device() const { return impl_->device; }
const FlightRecorder* NcclProcessGroup::flight_recorder() const { return impl_->flight.get(); }

uint64_t NcclProcessGroup::next_sequence_number() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->next_seq;
}

std::shared_ptr<Work> NcclProcessGroup::Impl::issue(CollectiveDesc d, CommBuffer in, CommBuffer out,
                                                    bool host_blocking, const std::function<void()>& launch) {
  if (in.device.is_cuda())
    DDP_CHECK(in.device.index == device, "nccl: ", d.str(false), ": buffer on ", in.device.str(),
              " but this group runs on cuda:", device);
  d.device = Device::cuda(device);
  std::unique_lock<std::mutex> g(mu);
  d.seq = next_seq++;
  flight->issued(d);
  auto work = std::make_shared<NcclWork>(d.str(), device, host_blocking);
  work->desc = d;
  if (!broken.empty()) {
    flight->failed(d.seq, broken);
    work->finish(std::make_exception_ptr(
        Error("nccl " + d.str() + " not run: the process group failed earlier and is unusable: " + broken)));
    return work;
  }
  try {
    if (options.debug_collectives && size > 1) tracker->check_same_call(d);
    DeviceGuard dg(device);
    cudaEvent_t ready;
    DDP_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    DDP_CUDA_CHECK(cudaEventRecord(ready, ddp::cuda::current_stream()));
    DDP_CUDA_CHECK(cudaStreamWaitEvent(stream, ready, 0));
    DDP_CUDA_CHECK(cudaEventDestroy(ready));
    DDP_CUDA_CHECK(cudaEventRecord(work->start, stream));
    launch();
    DDP_CUDA_CHECK(cudaEventRecord(work->end, stream));
    // The buffers' memory goes back to the pool in stream order: their frees wait for this stream.
    work->held = hold_until_stream_done(in, out, stream);
  } catch (const std::exception& e) {
    // The ranks are out of step now (this one took a sequence number without a collective): fail for good.
    flight->failed(d.seq, e.what());
    fail_all(e.what());
    work->finish(std::current_exception());
    return work;
  }
  work->deadline = std::chrono::steady_clock::now() + options.timeout;
  pending.push_back(work);
  last_issued = static_cast<int64_t>(d.seq);
  g.unlock();
  cv.notify_all();
  return work;
}

void NcclProcessGroup::Impl::fail_all(const std::string& first_error) {
  broken = first_error;
  DDP_LOG(Error, first_error);
  abort_communicator();
  bool first = true;
  for (auto& w : pending) {
    std::string msg =
        first ? first_error
              : "nccl " + w->desc.str() + " aborted: an earlier collective failed: " + first_error;
    flight->failed(w->desc.seq, msg);
    w->held.clear();
    w->finish(std::make_exception_ptr(Error(msg)));
    first = false;
  }
  pending.clear();
  flight->dump_to_dir("failure");
}

void NcclProcessGroup::Impl::abort_communicator() {
  if (!comm || aborted) return;
  aborted = true;
  try {
    DeviceGuard dg(device);
    DDP_NCCL_CHECK(ncclCommAbort(comm));  // unblocks the kernels of this communicator
  } catch (const std::exception& e) {
    DDP_LOG(Error, "nccl: ", e.what());
  }
}

void NcclProcessGroup::abort(const std::string& why) {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> g(s.mu);
    if (s.user_aborted) return;
    s.user_aborted = true;
    const std::string msg = "nccl group '" + s.prefix + "' aborted on rank " + std::to_string(s.rank) +
                            " of " + std::to_string(s.size) + ": " +
                            (why.empty() ? "abort() was called" : why);
    if (s.broken.empty()) {
      s.fail_all(msg);  // aborts the communicator; the pending works fail with msg
    } else {
      s.broken = msg + " (after an earlier failure: " + s.broken + ")";  // what later collectives say
      s.abort_communicator();
    }
  }
  s.cv.notify_all();
}

bool NcclProcessGroup::aborted() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->user_aborted;
}

void NcclProcessGroup::Impl::watchdog_loop() {
  try {
    DDP_CUDA_CHECK(cudaSetDevice(device));
  } catch (const Error& e) {
    DDP_LOG(Error, "nccl watchdog: ", e.what());
  }
  std::unique_lock<std::mutex> g(mu);
  while (true) {
    cv.wait_for(g, kWatchdogPeriod);
    // Publish this rank's progress for the stragglers report of the other ranks (store call without the
    // lock).
    if (last_issued > last_published) {
      int64_t seq = last_issued;
      g.unlock();
      try {
        tracker->mark_arrived(static_cast<uint64_t>(seq));
      } catch (const std::exception& e) {
        DDP_LOG(Warn, "nccl watchdog: cannot publish progress to the store: ", e.what());
      }
      g.lock();
      last_published = seq;
    }
    // Starts for the flight recorder (host time when seen), then completions in issue order.
    for (auto& w : pending) {
      if (w->seen_started) continue;
      if (cudaEventQuery(w->start) != cudaSuccess) break;  // later ones start after this one
      w->seen_started = true;
      flight->started(w->desc.seq);
    }
    while (!pending.empty()) {
      cudaError_t q = cudaEventQuery(pending.front()->end);
      if (q == cudaErrorNotReady) break;
      auto w = pending.front();
      pending.pop_front();
      w->held.clear();
      if (q == cudaSuccess) {
        float ms = -1.0f;
        if (cudaEventElapsedTime(&ms, w->start, w->end) != cudaSuccess) ms = -1.0f;
        if (!w->seen_started) flight->started(w->desc.seq);
        flight->completed(w->desc.seq, ms >= 0.0f ? static_cast<int64_t>(ms * 1e6) : -1);
        w->finish();
      } else {
        flight->failed(w->desc.seq, "CUDA error " + std::string(cudaGetErrorString(q)));
        w->finish(std::make_exception_ptr(
            Error("nccl " + w->desc.str() + ": CUDA error " + cudaGetErrorString(q))));
      }
    }
    if (!pending.empty() && comm && !aborted) {
      ncclResult_t async = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm, &async);
      if (r != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
        const auto& d = pending.front()->desc;
        g.unlock();
        std::string msg = tracker->failure_message(
            d, "nccl",
            std::string("asynchronous NCCL error: ") + ncclGetErrorString(r != ncclSuccess ? r : async));
        g.lock();
        fail_all(msg);
      } else if (std::chrono::steady_clock::now() > pending.front()->deadline) {
        const auto d = pending.front()->desc;
        g.unlock();
        std::string msg =
            tracker->failure_message(d, "nccl", "the collective did not finish on the GPU in time");
        g.lock();
        fail_all(msg);
      }
    }
    if (stopping && pending.empty()) return;
  }
}

std::shared_ptr<Work> NcclProcessGroup::allreduce(CommBuffer buf, ReduceOp op) {
  check_buffer(buf, "allreduce buffer", "nccl", device_memory_only());
  Impl& s = *impl_;
  CollectiveDesc d{CollectiveKind::Allreduce, 0, buf.numel, buf.dtype, op, -1, buf.device};
  void* p = buf.data;
  size_t n = static_cast<size_t>(buf.numel);
  CommBuffer same = buf;
  return s.issue(d, std::move(buf), std::move(same), false, [&] {
    DDP_NCCL_ENQUEUE(s, ncclAllReduce(p, p, n, nccl_dtype(d.dtype), nccl_reduce_op(op, size()), s.comm,
                                      s.stream));
  });
}

std::shared_ptr<Work> NcclProcessGroup::broadcast(CommBuffer buf, int root) {
  check_buffer(buf, "broadcast buffer", "nccl", device_memory_only());
  check_root(root, size());
  Impl& s = *impl_;
  CollectiveDesc d{CollectiveKind::Broadcast, 0, buf.numel, buf.dtype, ReduceOp::Sum, root, buf.device};
  void* p = buf.data;
  size_t n = static_cast<size_t>(buf.numel);
  CommBuffer same = buf;
  return s.issue(d, std::move(buf), std::move(same), false, [&] {
    DDP_NCCL_ENQUEUE(s, ncclBroadcast(p, p, n, nccl_dtype(d.dtype), root, s.comm, s.stream));
  });
}

std::shared_ptr<Work> NcclProcessGroup::allgather(CommBuffer in, CommBuffer out) {
  check_buffer(in, "allgather input", "nccl", device_memory_only());
  check_buffer(out, "allgather output", "nccl", device_memory_only());
  check_allgather(in, out, size());
  Impl& s = *impl_;
  CollectiveDesc d{CollectiveKind::Allgather, 0, in.numel, in.dtype, ReduceOp::Sum, -1, in.device};
  void* src = in.data;
  void* dst = out.data;
  size_t n = static_cast<size_t>(in.numel);
  return s.issue(d, std::move(in), std::move(out), false, [&] {
    DDP_NCCL_ENQUEUE(s, ncclAllGather(src, dst, n, nccl_dtype(d.dtype), s.comm, s.stream));
  });
}

std::shared_ptr<Work> NcclProcessGroup::reduce_scatter(CommBuffer in, CommBuffer out, ReduceOp op) {
  check_buffer(in, "reduce_scatter input", "nccl", device_memory_only());
  check_buffer(out, "reduce_scatter output", "nccl", device_memory_only());
  check_reduce_scatter(in, out, size());
  Impl& s = *impl_;
  CollectiveDesc d{CollectiveKind::ReduceScatter, 0, in.numel, in.dtype, op, -1, in.device};
  void* src = in.data;
  void* dst = out.data;
  size_t n = static_cast<size_t>(out.numel);
  return s.issue(d, std::move(in), std::move(out), false, [&] {
    DDP_NCCL_ENQUEUE(s, ncclReduceScatter(src, dst, n, nccl_dtype(d.dtype), nccl_reduce_op(op, size()), s.comm,
                                          s.stream));
  });
}

std::shared_ptr<Work> NcclProcessGroup::barrier() {
  Impl& s = *impl_;
  CollectiveDesc d{CollectiveKind::Barrier, 0, 0, DType::F32, ReduceOp::Sum, -1, Device::cuda(s.device)};
  CommBuffer none{nullptr, 0, DType::F32, Device::cuda(s.device), nullptr};
  return s.issue(d, none, none, true, [&] {
    // The barrier is a one-float all-reduce (the error's call text shows the barrier's scratch).
    DDP_NCCL_ENQUEUE(
        s, ncclAllReduce(s.barrier_scratch, s.barrier_scratch, 1, ncclFloat32, ncclSum, s.comm, s.stream));
  });
}

}  // namespace ddp::dist

// queued_process_group.cpp - the entry points, the issue queue and the worker loop shared by the CPU groups.
#include "runtime/distributed/queued_process_group.h"

#include <algorithm>

#include "runtime/core/error.h"
#include "runtime/core/log.h"

namespace ddp::dist {

namespace {
// The base's first member initializer: throws before anything of the group exists.
std::string checked_label(std::string label, const Store* store, int rank, int size,
                          const ProcessGroupOptions& options) {
  DDP_CHECK(store != nullptr, label, ": a process group needs a store");
  DDP_CHECK(size >= 1 && rank >= 0 && rank < size, label, ": rank ", rank, " of world size ", size,
            " is invalid: expected 0 <= rank < size");
  DDP_CHECK(options.timeout.count() > 0, label, ": the collective timeout must be positive, got ",
            options.timeout.count(), " ms");
  return label;
}
}  // namespace

QueuedProcessGroup::QueuedProcessGroup(const Store* store, int rank, int size,
                                       const ProcessGroupOptions& options, std::string label, OnStop on_stop)
    : ProcessGroup(rank, size),
      label_(checked_label(std::move(label), store, rank, size, options)),
      on_stop_(on_stop),
      run_on_caller_(options.run_on_caller),
      flight_(std::make_unique<FlightRecorder>(label_, rank, size, flight_recorder_entries_from_env())) {}

QueuedProcessGroup::~QueuedProcessGroup() {
  stop_worker();
  // With DDP_FLIGHT_RECORDER_DIR the record is also left at the end: a rank that finished while its peers
  // still wait (uneven inputs) shows that it finished, and after which collective.
  flight_->dump_to_dir(flight_->has_failed() ? "failure" : "exit", /*log=*/false);
}

void QueuedProcessGroup::start_worker(const std::string& group_name) {
  flight_->set_group_name(group_name);
  if (!run_on_caller_) worker_ = std::thread([this] { loop(); });
}

void QueuedProcessGroup::stop_worker() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

uint64_t QueuedProcessGroup::next_sequence_number() const {
  std::lock_guard<std::mutex> g(mu_);
  return next_seq_;
}

std::string QueuedProcessGroup::aborted_message(const CollectiveDesc& d, const char* verb) const {
  return label_ + " " + d.str() + " " + verb + ": the process group was aborted on rank " +
         std::to_string(rank()) + " of " + std::to_string(size()) + ": " + abort_reason_;
}

bool QueuedProcessGroup::aborted() const {
  std::lock_guard<std::mutex> g(mu_);
  return aborted_;
}

void QueuedProcessGroup::abort(const std::string& why) {
  std::deque<Task> dropped;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = why.empty() ? std::string("abort() was called") : why;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  DDP_LOG(Warn, label_, " group '", flight_->group_name(), "': rank ", rank(), " of ", size(),
          " aborted: ", abort_reason_);
  for (Task& t : dropped) {
    const std::string msg = aborted_message(t.desc, "not run");
    flight_->failed(t.desc.seq, msg);
    t.in = {};
    t.out = {};
    t.staging.reset();
    t.work->finish(std::make_exception_ptr(Error(msg)));
  }
  interrupt(abort_reason_);
}

void QueuedProcessGroup::number_locked(Task& t) {
  DDP_CHECK(!stopping_, label_, ": ", t.desc.str(false), " issued while the process group is being destroyed");
  t.desc.seq = next_seq_++;
  flight_->issued(t.desc);
  t.work = make_work(t);
}

std::shared_ptr<Work> QueuedProcessGroup::enqueue(CollectiveDesc d, CommBuffer in, CommBuffer out) {
  Task t;
  t.in = std::move(in);
  t.out = std::move(out);
  d.device = t.in.device;
  d.timeout = ScopedCollectiveTimeout::current();
  t.desc = d;
  prepare(t);
  if (run_on_caller_) {
    // The caller runs it now: the sequence number is taken under caller_mu_, so collectives run in its order.
    std::lock_guard<std::mutex> turn(caller_mu_);
    {
      std::lock_guard<std::mutex> g(mu_);
      number_locked(t);
    }
    auto work = t.work;
    run_one(t);  // an abort() meanwhile fails it there, with the reason
    return work;
  }
  std::lock_guard<std::mutex> g(mu_);
  number_locked(t);
  auto work = t.work;
  if (aborted_) {  // fails at once, never reaches the worker
    const std::string msg = aborted_message(t.desc, "not run");
    flight_->failed(t.desc.seq, msg);
    work->finish(std::make_exception_ptr(Error(msg)));
    return work;
  }
  queue_.push_back(std::move(t));
  cv_.notify_all();
  return work;
}

void QueuedProcessGroup::loop() {
  for (;;) {
    Task t;
    bool drop = false;
    {
      std::unique_lock<std::mutex> g(mu_);
      cv_.wait(g, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      t = std::move(queue_.front());
      queue_.pop_front();
      drop = stopping_ && on_stop_ == OnStop::FailQueued;  // (abort() empties the queue itself)
    }
    if (drop) {
      flight_->failed(t.desc.seq, "the process group was destroyed before it ran");
      t.work->finish(std::make_exception_ptr(
          Error(label_ + " " + t.desc.str() + " not run: the process group was destroyed before it ran")));
      continue;
    }
    run_one(t);
  }
}

void QueuedProcessGroup::run_one(Task& t) {
  {
    std::unique_lock<std::mutex> g(mu_);
    if (aborted_) {  // taken from the queue just before abort() emptied it
      const std::string msg = aborted_message(t.desc, "not run");
      g.unlock();
      flight_->failed(t.desc.seq, msg);
      t.work->finish(std::make_exception_ptr(Error(msg)));
      return;
    }
  }
  if (!broken_.empty()) {
    flight_->failed(t.desc.seq, broken_);
    t.work->finish(std::make_exception_ptr(
        Error(label_ + " " + t.desc.str() +
              " not run: the process group failed earlier and is unusable: " + broken_)));
    return;
  }
  try {
    flight_->started(t.desc.seq);
    run(t);
    flight_->completed(t.desc.seq);
    // Release the keepalives before the Work completes, so a waiter sees them released.
    t.in = {};
    t.out = {};
    t.staging.reset();
    t.work->finish();
  } catch (const std::exception& e) {
    std::exception_ptr err = std::current_exception();
    bool was_aborted = false;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (aborted_) {
        // Interrupted by abort() (or failed meanwhile): the error names the reason, and what the backend saw.
        was_aborted = true;
        broken_ = aborted_message(t.desc, "ended") + " (the backend reported: " + e.what() + ")";
        err = std::make_exception_ptr(Error(broken_));
      } else {
        broken_ = e.what();
      }
    }
    if (!was_aborted) on_failure(broken_);
    t.in = {};
    t.out = {};
    t.staging.reset();
    if (was_aborted) {
      DDP_LOG(Warn, broken_);
    } else {
      DDP_LOG(Error, e.what());
    }
    flight_->failed(t.desc.seq, broken_);
    write_failure_record();
    t.work->finish(err);
  }
}

void QueuedProcessGroup::write_failure_record() { flight_->dump_to_dir("failure"); }

// ------------------------------------------------------------------------------------------ entry points

std::shared_ptr<Work> QueuedProcessGroup::allreduce(CommBuffer buf, ReduceOp op) {
  check_buffer(buf, "allreduce buffer", label_);
  CollectiveDesc d{CollectiveKind::Allreduce, 0, buf.numel, buf.dtype, op, -1, buf.device};
  CommBuffer same = buf;
  return enqueue(d, std::move(buf), std::move(same));
}

std::shared_ptr<Work> QueuedProcessGroup::broadcast(CommBuffer buf, int root) {
  check_buffer(buf, "broadcast buffer", label_);
  check_root(root, size());
  CollectiveDesc d{CollectiveKind::Broadcast, 0, buf.numel, buf.dtype, ReduceOp::Sum, root, buf.device};
  CommBuffer same = buf;
  return enqueue(d, std::move(buf), std::move(same));
}

std::shared_ptr<Work> QueuedProcessGroup::allgather(CommBuffer in, CommBuffer out) {
  check_buffer(in, "allgather input", label_);
  check_buffer(out, "allgather output", label_);
  check_allgather(in, out, size());
  CollectiveDesc d{CollectiveKind::Allgather, 0, in.numel, in.dtype, ReduceOp::Sum, -1, in.device};
  return enqueue(d, std::move(in), std::move(out));
}

std::shared_ptr<Work> QueuedProcessGroup::reduce_scatter(CommBuffer in, CommBuffer out, ReduceOp op) {
  check_buffer(in, "reduce_scatter input", label_);
  check_buffer(out, "reduce_scatter output", label_);
  check_reduce_scatter(in, out, size());
  CollectiveDesc d{CollectiveKind::ReduceScatter, 0, in.numel, in.dtype, op, -1, in.device};
  return enqueue(d, std::move(in), std::move(out));
}

std::shared_ptr<Work> QueuedProcessGroup::barrier() {
  CollectiveDesc d{CollectiveKind::Barrier, 0, 0, DType::F32, ReduceOp::Sum, -1, Device::cpu()};
  return enqueue(d, CommBuffer{}, CommBuffer{});
}

}  // namespace ddp::dist

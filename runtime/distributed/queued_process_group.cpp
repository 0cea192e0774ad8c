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
      flight_(std::make_unique<FlightRecorder>(label_, rank, size, flight_recorder_entries_from_env())) {}

QueuedProcessGroup::~QueuedProcessGroup() {
  stop_worker();
  // With DDP_FLIGHT_RECORDER_DIR the record is also left at the end: a rank that finished while its peers
  // still wait (uneven inputs) shows that it finished, and after which collective.
  flight_->dump_to_dir(flight_->has_failed() ? "failure" : "exit", /*log=*/false);
}

void QueuedProcessGroup::start_worker(const std::string& group_name) {
  flight_->set_group_name(group_name);
  worker_ = std::thread([this] { loop(); });
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

std::shared_ptr<Work> QueuedProcessGroup::enqueue(CollectiveDesc d, CommBuffer in, CommBuffer out) {
  Task t;
  t.in = std::move(in);
  t.out = std::move(out);
  d.device = t.in.device;
  t.desc = d;
  prepare(t);
  std::lock_guard<std::mutex> g(mu_);
  DDP_CHECK(!stopping_, label_, ": ", d.str(false), " issued while the process group is being destroyed");
  t.desc.seq = next_seq_++;
  flight_->issued(t.desc);
  t.work = make_work(t);
  auto work = t.work;
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
      drop = stopping_ && on_stop_ == OnStop::FailQueued;
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
    broken_ = e.what();
    on_failure(broken_);
    t.in = {};
    t.out = {};
    t.staging.reset();
    DDP_LOG(Error, e.what());
    flight_->failed(t.desc.seq, broken_);
    write_failure_record();
    t.work->finish(std::current_exception());
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

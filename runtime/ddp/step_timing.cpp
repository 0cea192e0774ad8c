// step_timing.cpp - marks per bucket and around finalize, on the host or the device clock (see
// step_timing.h).
#include "runtime/ddp/step_timing.h"

#include <algorithm>

namespace ddp {

void StepTiming::begin(Device device, bool device_clock, size_t num_buckets) {
  for (auto& b : buckets_) b.work.reset();
  clock_.start(device_clock ? device : Device::cpu());
  resolved_ = false;
  started_ = true;
  buckets_.assign(num_buckets, BucketMarks{});
  has_finalize_ = false;
  used_map_sync_s_ = 0;
}

void StepTiming::bucket_ready(size_t b) {
  if (b >= buckets_.size()) return;
  buckets_[b].ready = clock_.now();
  buckets_[b].has_ready = true;
}

void StepTiming::bucket_launched(size_t b, std::shared_ptr<dist::Work> work,
                                 std::chrono::steady_clock::time_point issued_at) {
  if (b >= buckets_.size()) return;
  BucketMarks& m = buckets_[b];
  m.launched = clock_.on_device() && work ? clock_.external_event(work->device_start_event())
                                          : clock_.at_host_time(issued_at);
  m.has_launch = true;
  m.work = std::move(work);
}

void StepTiming::bucket_completed(size_t b) {
  if (b >= buckets_.size()) return;
  BucketMarks& m = buckets_[b];
  if (clock_.on_device() && m.work) {
    m.completed = clock_.external_event(m.work->device_end_event());
  } else {
    const auto finished = m.work ? m.work->finished_at() : std::chrono::steady_clock::time_point{};
    m.completed = finished.time_since_epoch().count() != 0 ? clock_.at_host_time(finished) : clock_.now();
  }
  m.has_completed = true;
}

void StepTiming::finalize_begin() {
  if (!started_) return;
  finalize_begin_ = clock_.now();
  has_finalize_ = false;
}

void StepTiming::finalize_end() {
  if (!started_) return;
  finalize_end_ = clock_.now();
  has_finalize_ = true;
}

void StepTiming::fill(IterationStats& stats) {
  if (!started_) return;  // begin() never ran: the caller's host numbers stay
  if (!resolved_) resolve();
  for (size_t i = 0; i < resolved_buckets_.size() && i < stats.buckets.size(); ++i) {
    const BucketMarks& m = buckets_[i];
    if (m.has_ready) stats.buckets[i].ready_s = resolved_buckets_[i].ready_s;
    if (m.has_launch) stats.buckets[i].launched_s = resolved_buckets_[i].launched_s;
    if (m.has_completed) stats.buckets[i].completed_s = resolved_buckets_[i].completed_s;
  }
  stats.communication_s = communication_s_;
  if (has_finalize_) {
    stats.backward_compute_s = backward_compute_s_;
    stats.exposed_communication_s = exposed_s_;
  }
  stats.used_map_sync_s = used_map_sync_s_;
  stats.device_clock = clock_.on_device();
}

void StepTiming::resolve() {
  resolved_buckets_.assign(buckets_.size(), BucketTiming{});
  double first_launch = 1e300, last_done = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const BucketMarks& m = buckets_[i];
    BucketTiming& t = resolved_buckets_[i];
    if (m.has_ready) t.ready_s = clock_.seconds(m.ready);
    if (m.has_launch) first_launch = std::min(first_launch, t.launched_s = clock_.seconds(m.launched));
    if (m.has_completed) last_done = std::max(last_done, t.completed_s = clock_.seconds(m.completed));
  }
  communication_s_ = first_launch < 1e300 ? std::max(0.0, last_done - first_launch) : 0;
  if (has_finalize_) {
    backward_compute_s_ = clock_.seconds(finalize_begin_);
    exposed_s_ = std::max(0.0, clock_.seconds(finalize_end_) - backward_compute_s_);
  }
  for (auto& b : buckets_) b.work.reset();  // their events are read; release the works
  resolved_ = true;
}

}  // namespace ddp

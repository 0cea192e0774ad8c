// step_timing.h - the measurements behind one iteration's IterationStats, taken by the reducer at a few
// points (forward end, each bucket ready / launched / completed, finalize start / end) and turned into
// seconds when the statistics are read.
//
// Host clock (CPU parameters, or a backend without device events, e.g. Gloo staging): host time stamps; a
// bucket completes when its Work's backend marked it finished (Work::finished_at), else when the reducer saw
// it. Device clock (CUDA parameters on NCCL): timing events. "ready" and the finalize marks are events on the
// compute stream - the time the GPU got there, not when the host queued it - and "launched" / "completed" are
// the NCCL work's own start and end events on the comm stream. Exposed communication is then finalize end -
// finalize start on the compute stream: how long the GPU's compute stream waited for communication (plus the
// write-back copies). Reading the statistics waits for these events (a host synchronisation paid only by the
// reader); nothing in the step waits for them.
#pragma once
#include <chrono>
#include <memory>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/ddp/iteration_stats.h"
#include "runtime/ddp/step_clock.h"
#include "runtime/distributed/process_group.h"

namespace ddp {

class StepTiming {
 public:
  // At forward end: a new iteration with `num_buckets` buckets; device_clock selects CUDA events.
  void begin(Device device, bool device_clock, size_t num_buckets);
  bool on_device() const { return clock_.on_device(); }
  void bucket_ready(size_t bucket);
  // Keeps `work` (its events) until the statistics were filled. The host clock takes `issued_at`, the time
  // taken before the collective was issued: a fast backend may finish it before this call.
  void bucket_launched(size_t bucket, std::shared_ptr<dist::Work> work,
                       std::chrono::steady_clock::time_point issued_at);
  // After the work's wait(): host clock takes the backend's finish time (or now); device clock its end event.
  void bucket_completed(size_t bucket);
  void finalize_begin();
  void finalize_end();
  // Host seconds the used-map copy to the host blocked (find_unused_parameters on a GPU synchronizes there).
  void used_map_sync(double seconds) { used_map_sync_s_ = seconds; }

  // Fills the timing fields of `stats` (stats.buckets must have one entry per bucket, in index order).
  // Device clock: the first call waits for this iteration's events; later calls reuse the result. Does
  // nothing before the first begin().
  void fill(IterationStats& stats);

 private:
  void resolve();
  struct BucketMarks {
    StepClock::Mark ready = 0, launched = 0, completed = 0;
    bool has_ready = false, has_launch = false, has_completed = false;
    std::shared_ptr<dist::Work> work;
  };
  StepClock clock_;
  std::vector<BucketMarks> buckets_;
  StepClock::Mark finalize_begin_ = 0, finalize_end_ = 0;
  bool has_finalize_ = false;
  double used_map_sync_s_ = 0;
  bool resolved_ = false;
  bool started_ = false;
  std::vector<BucketTiming> resolved_buckets_;
  double communication_s_ = 0, backward_compute_s_ = 0, exposed_s_ = 0;
};

}  // namespace ddp

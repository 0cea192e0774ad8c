// step_clock.h - the clock behind the reducer's statistics (iteration_stats.h). On the CPU a mark is a host
// steady-clock time stamp. On a GPU a mark is a timing event recorded on the current (compute) stream - the
// time the GPU reached that point, not when the host queued it - or an event a collective recorded on its own
// stream (NCCL's start and end); marks are turned into seconds since the base mark only when resolved, and
// resolving waits for the events (the only host synchronisation the statistics cost, paid when they are
// read). Without CUDA, or for CPU parameters, every mark is a host time: the fallback the CPU tests exercise.
#pragma once
#include <chrono>
#include <cstddef>
#include <vector>

#include "runtime/core/device.h"

namespace ddp {

class StepClock {
 public:
  using Mark = size_t;
  StepClock() = default;
  ~StepClock();
  StepClock(const StepClock&) = delete;
  StepClock& operator=(const StepClock&) = delete;

  // Drops earlier marks and records the base mark (time zero) for `device`.
  void start(Device device);
  // CUDA clock: events on the current stream; host clock: now.
  bool on_device() const { return device_; }
  Mark now();
  // A host time stamp (always host time, e.g. a Gloo work's completion seen by its thread). On a device
  // clock it is converted with the base mark's host time, so it is comparable only roughly (documented).
  Mark at_host_time(std::chrono::steady_clock::time_point t);
  // An event recorded by someone else on the same device (not owned; must outlive resolve()). Host clock:
  // falls back to now().
  Mark external_event(void* cuda_event);
  // Seconds from the base mark to `m`. Device clock: waits for the events involved.
  double seconds(Mark m);

 private:
  struct Point {
    std::chrono::steady_clock::time_point host{};
    void* event = nullptr;  // device clock: the event (owned unless external)
    bool owned = false;
    bool has_host = false;
  };
  void clear();
  bool device_ = false;
  std::chrono::steady_clock::time_point base_host_{};
  std::vector<Point> points_;  // points_[0]: the base mark
};

}  // namespace ddp
